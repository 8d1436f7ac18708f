"""attnprof as a library: ``predict``, ``sweep``, ``report`` and ``gate`` with typed keywords.

The command line (``cli.py``) is glue over these four functions, so a notebook or a
script gets exactly what ``attnprof ...`` does, without parsing its output::

    from attnprof import api
    run = api.sweep(variants=["sdpa", "lsh"], max_len=4096, out="runs/x")
    print(run.report_path)

Flags and keywords mean the same: keywords given (not None) override the scenario
file's values, which override ``Scenario``'s defaults (``build_scenario``). Every
mistake raises a ``attnprof.errors.UserError`` subclass whose message is one line.
Nothing here prints, except a sweep's progress on stderr (``progress=False``) and the
notes passed to ``log``. torch, pandas and matplotlib are imported only when needed.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from attnprof.arguments import ArgumentError, UsageProblem, checked, refuse_ignored  # noqa: F401 - API
from attnprof.profiler.records import canonical_dtype
from attnprof.profiler.units import parse_bytes
from attnprof.scenarios.scenario import Scenario, load_scenario

PathLike = Union[str, Path]
Log = Callable[[str], None]
DEFAULT_SCENARIO = "default"  # what `sweep` measures when no scenario is named
PREDICT_LEN = 65536  # what `predict` predicts when no length is named
# Capacity predictions for the report (fake tensors): beyond this many seconds the report
# extrapolates the rest, marked '~'. The full set takes ~70 s on 2 cores; most of it
# goes to the longest lengths of the block-wise variants.
CAPACITY_SECONDS = 45.0
REPORT_SECONDS = 7.0  # the report's own soft time target (charts, and predictions still missing)


def _quiet(_: str) -> None:
    pass


# --- the scenario -----------------------------------------------------------------------------
@checked
def build_scenario(scenario: Union[PathLike, Scenario, None] = None, *, base: Optional[Scenario] = None,
                   variants: Union[str, Sequence[str], None] = None, modes: Union[str, Sequence[str], None] = None,
                   scope: Optional[str] = None, batch: Optional[int] = None, heads: Optional[int] = None,
                   head_dim: Optional[int] = None, d_model: Optional[int] = None, layers: Optional[int] = None,
                   dtype: Optional[str] = None, seq_lens: Optional[Sequence[int]] = None,
                   min_len: Optional[int] = None, max_len: Optional[int] = None,
                   tokens_per_batch: Optional[int] = None, ff_chunks: Optional[int] = None,
                   forward_only: Optional[bool] = None, repeats: Optional[int] = None,
                   warmup: Optional[int] = None, point_timeout_s: Optional[float] = None) -> Scenario:
    """Keywords over a scenario (a built-in NAME, a TOML path or a ``Scenario``) over
    ``base`` (default ``Scenario()``) -> one validated Scenario.

    ``variants`` and ``modes`` take lists or comma-separated text (``"sdpa,lsh[n_hashes=8]"``);
    ``head_dim`` sets ``d_model = heads * head_dim``. Every variant must run at one of the
    lengths at least (its other points are skipped with the reason); the variants'
    options and the shape are checked here, so a sweep never starts on a typo.
    """
    sc = scenario if isinstance(scenario, Scenario) else (
        load_scenario(str(scenario)) if scenario else (base or Scenario()))
    if head_dim is not None and d_model is not None:
        raise UsageProblem("give --head-dim or --d-model, not both")
    if head_dim is not None:
        if head_dim <= 0:
            raise UsageProblem(f"--head-dim must be positive, got {head_dim}")
        d_model = head_dim * (heads if heads is not None else sc.heads)
    if dtype is not None:
        dtype = canonical_dtype(dtype)
    for name, value in (("--seq-len", min(seq_lens) if seq_lens else None), ("--min-len", min_len),
                        ("--max-len", max_len)):
        if value is not None and value <= 0:
            raise UsageProblem(f"{name} must be a positive length, got {value}")
    for name, value in (("--repeats", repeats), ("--point-timeout", point_timeout_s)):
        if value is not None and value <= 0:
            raise UsageProblem(f"{name} must be positive, got {value}")
    if warmup is not None and warmup < 0:
        raise UsageProblem(f"--warmup must not be negative, got {warmup}")
    if tokens_per_batch is not None and tokens_per_batch <= 0:
        raise UsageProblem(f"--tokens-per-batch must be a positive number of tokens, got {tokens_per_batch}; "
                           f"leave it out for a fixed --batch")
    refuse_ignored(sc, seq_lens=seq_lens, min_len=min_len, max_len=max_len, batch=batch,
                    tokens_per_batch=tokens_per_batch, scope=scope, modes=modes, layers=layers, ff_chunks=ff_chunks)
    lengths = tuple(seq_lens) if seq_lens else (() if (min_len or max_len) else None)
    overrides = dict(variants=_listed(variants), modes=_listed(modes), scope=scope, batch=batch, heads=heads,
                     d_model=d_model, layers=layers, dtype=dtype, seq_lens=lengths, min_len=min_len,
                     max_len=max_len, tokens_per_batch=tokens_per_batch, forward_only=forward_only,
                     ff_chunks=ff_chunks, repeats=repeats, warmup=warmup, point_timeout_s=point_timeout_s)
    changed = {k: v for k, v in overrides.items() if v is not None and v != getattr(sc, k)}
    sc = sc.override(**overrides)
    if changed:  # the file's description no longer tells the whole story
        told = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in changed.items())
        sc = sc.override(description=f"{sc.description} [overridden: {told}]".strip())
    if sc.min_len > sc.max_len and not sc.seq_lens:
        raise UsageProblem(f"--min-len {sc.min_len} is above --max-len {sc.max_len}")
    _check_points(sc)
    return sc


def _listed(values: Union[str, Sequence[str], None]) -> Optional[tuple]:
    """'a,b' or ['a', 'b,c'] -> a tuple of labels (commas inside [...] stay); None stays None."""
    if values is None:
        return None
    from attnprof.scenarios.variants.catalog import split_labels

    items = [values] if isinstance(values, str) else list(values)
    return tuple(label for item in items for label in split_labels(item)) or None


def _check_points(sc: Scenario) -> None:
    """The shape, the modes and every variant's options, through the real registry."""
    from attnprof.profiler.runner.plan import modes_of, shape_at, variant_specs
    from attnprof.scenarios.variants.base import VariantError

    shape_at(sc, sc.lengths()[0] if sc.lengths() else 1)  # validates d_model/heads/dtype
    modes_of(sc)
    for spec in variant_specs(sc):
        problems = []
        for n in sc.lengths():
            try:
                spec.check_shape(n, sc.heads, sc.d_model // sc.heads)
                break
            except VariantError as exc:
                problems.append(str(exc))
        else:
            if problems:
                raise VariantError(problems[-1])


def _bytes(text: Union[str, int], flag: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise UsageProblem(f"{flag}: {exc}") from None


# --- predict ----------------------------------------------------------------------------------
@dataclass
class Predictions:
    """Predicted records (one dict per point, or per series with a budget) and their table."""

    records: list
    scenario: Scenario
    budget_bytes: Optional[int] = None
    gpus: list = field(default_factory=list)  # GPU table keys the GPU memory model ran for (--gpu)
    sort: Optional[str] = None  # "time": rank the points by predicted step time (table())
    notes: list = field(default_factory=list)  # warnings for stderr (a failed calibration)
    memory_limit_bytes: Optional[int] = None  # what "fits" means for the CPU ranking
    gpu_labels: dict = field(default_factory=dict)  # GPU key -> as printed (GpuSpec.label: an override says so)

    def table(self) -> str:
        from attnprof.profiler.predict.points import format_table

        if self.gpu_labels:  # the records keep the key (data); the table shows the label
            return replace(self, records=[{**r, "gpu": self.gpu_labels.get(r.get("gpu"), r.get("gpu"))}
                                          if "gpu" in r else r for r in self.records],
                           gpus=[self.gpu_labels.get(k, k) for k in self.gpus], gpu_labels={}).table()
        if self.sort == "time":
            from attnprof.profiler.timemodel.format import format_ranking

            return format_ranking(self.records, gpus=self.gpus, memory_limit_bytes=self.memory_limit_bytes)
        if not self.gpus:
            text = format_table(self.records, self.budget_bytes)
            if self.budget_bytes is None:
                from attnprof.profiler.timemodel.format import format_time_table

                text += "\n\n" + format_time_table([r for r in self.records if r.get("status") == "ok"])
            return text
        from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS
        from attnprof.profiler.memmodel.gpu_format import format_gpu_budget_table, format_gpu_table

        if self.budget_bytes is not None:
            return format_gpu_budget_table(self.records)
        points = {}  # one row per point for the fake-tensor table; the model's rows below it
        for r in self.records:
            points.setdefault(tuple(r.get(k) for k in ("variant", "mode", "scope", "seq_len", "batch")),
                              {k: v for k, v in r.items() if k not in GPU_FIELDS})
        return format_table(list(points.values())) + "\n\n" + format_gpu_table(self.records)


@checked
def predict(scenario: Union[PathLike, Scenario, None] = None, *, budget: Union[str, int, None] = None,
            variants: Union[str, Sequence[str], None] = None, modes: Union[str, Sequence[str], None] = None,
            scope: Optional[str] = None, batch: Optional[int] = None, heads: Optional[int] = None,
            head_dim: Optional[int] = None, d_model: Optional[int] = None, layers: Optional[int] = None,
            dtype: Optional[str] = None, seq_lens: Optional[Sequence[int]] = None, min_len: Optional[int] = None,
            max_len: Optional[int] = None, tokens_per_batch: Optional[int] = None,
            ff_chunks: Optional[int] = None, forward_only: Optional[bool] = None,
            gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = (),
            resolution: Optional[int] = None, no_cache: bool = False, sort: Optional[str] = None) -> Predictions:
    """Peak memory and FLOPs of each point without allocating (fake tensors, any machine).

    Without a scenario or lengths it predicts every variant at 65536 tokens. ``budget``
    ('80GiB' or bytes): per series, the longest power-of-two length whose predicted peak
    fits, searched from ``min_len`` (default 256) up to ``max_len`` (default 1M); with
    ``resolution`` (tokens), the longest multiple of it that fits, by a search over exact
    predictions (``longest_fitting``). ``no_cache``: neither read nor write the persistent
    prediction cache (profiler/predict/cache.py).

    ``gpus`` (GPU table keys, ``gpu_table``): also run the GPU memory model, one record
    per point x GPU with the ``gpu_*`` fields (predicted allocator peaks and total; see
    docs/gpu.md). With ``budget`` too: per series and GPU, the longest length whose
    modelled total fits both the GPU's memory and the budget. ``gpu_files``: more GPUs
    (TOML), after ATTNPROF_GPUS's.

    Without ``budget``, each record also has its predicted step time on this machine's CPU
    (``predicted_time_fwd_ms`` / ``_bwd_ms``; calibrated on first use, ``calibrate``) and,
    with ``gpus``, on each GPU (``gpu_time_fwd_ms`` / ``_bwd_ms``, ``gpu_tokens_per_s``).
    ``sort="time"``: ``table()`` ranks the points that fit (the GPU's memory with ``gpus``,
    else this machine's) by predicted step time, fastest first.
    """
    from attnprof.profiler.predict import cache

    if sort not in (None, "time"):
        raise UsageProblem(f"--sort {sort!r}: the one order is 'time'")
    if sort and budget is not None:
        raise UsageProblem("--sort time ranks the points at the lengths given; leave out --budget")
    if seq_lens and budget is not None:
        raise UsageProblem("--budget searches the lengths from --min-len to --max-len; --seq-len would be ignored")
    if resolution is not None:
        if resolution <= 0:
            raise UsageProblem(f"--resolution must be a positive number of tokens, got {resolution}")
        if budget is None:
            raise UsageProblem("--resolution goes with --budget: the longest length that fits, at that resolution")
        if gpus:
            raise UsageProblem("--resolution is not available with --gpu; leave out one of them")
    with cache.disabled() if no_cache else contextlib.nullcontext():
        cache.check_folder()  # its one warning before any worker starts
        return _predictions(scenario, budget=budget, variants=variants, modes=modes, scope=scope, batch=batch,
                        heads=heads, head_dim=head_dim, d_model=d_model, layers=layers, dtype=dtype,
                        seq_lens=seq_lens, min_len=min_len, max_len=max_len, tokens_per_batch=tokens_per_batch,
                        ff_chunks=ff_chunks, forward_only=forward_only, gpus=gpus, gpu_files=gpu_files,
                        resolution=resolution, sort=sort)


def _predictions(scenario, *, budget, variants, modes, scope, batch, heads, head_dim, d_model, layers, dtype, seq_lens,
             min_len, max_len, tokens_per_batch, ff_chunks, forward_only, gpus, gpu_files, resolution,
             sort=None) -> Predictions:
    from attnprof.profiler.predict.points import longest_fitting

    budget_bytes = _bytes(budget, "--budget") if budget is not None else None
    specs = _named_gpus(gpus, gpu_files)  # unknown names fail before any work
    sc = build_scenario(scenario, base=Scenario(min_len=PREDICT_LEN, max_len=PREDICT_LEN), variants=variants,
                        modes=modes, scope=scope, batch=batch, heads=heads, head_dim=head_dim, d_model=d_model,
                        layers=layers, dtype=dtype, seq_lens=seq_lens, min_len=min_len, max_len=max_len,
                        tokens_per_batch=tokens_per_batch, ff_chunks=ff_chunks, forward_only=forward_only)
    keys = [g.key for g in specs]
    labels = {g.key: g.label for g in specs if g.label != g.key}
    start = 1 << max(0, (min_len or 256) - 1).bit_length()  # the first power of two >= min_len
    if budget_bytes is None:
        from functools import partial

        from attnprof.profiler.runner.plan import series
        from attnprof.profiler.predict.points import point_key, prediction_record
        from attnprof.profiler.predict.pool import spread
        from attnprof.profiler.timemodel.machine import machine_rates

        notes: list = []
        # this CPU's step times: from its cached calibration; measured first (~3 s) only when
        # asked to rank by time, so a plain prediction stays at planning speed
        rates = machine_rates(warn=notes.append, measure=sort == "time" and not specs)
        if rates is None and not (sort == "time" and not specs) and not notes:
            notes.append("note: step times on this CPU: run `attnprof calibrate` once (a few seconds, cached)")
        records = spread(partial(prediction_record, rates=rates), [p for s in series(sc) for p in s],
                         warm_key=point_key)
        if specs:
            from attnprof.profiler.predict.gpu_points import add_gpu_fields

            records = add_gpu_fields(records, [p for s in series(sc) for p in s], specs)
        limit = default_memory_limit("cpu") if sort and not specs else None
        return Predictions(records, sc, gpus=keys, sort=sort, notes=notes, memory_limit_bytes=limit,
                           gpu_labels=labels)
    if specs:
        from attnprof.profiler.predict.gpu_points import gpu_longest_fitting

        return Predictions(gpu_longest_fitting(sc, specs, budget_bytes, start=start, limit=max_len), sc,
                           budget_bytes, gpus=keys, gpu_labels=labels)
    return Predictions(longest_fitting(sc, budget_bytes, start=start, limit=max_len, resolution=resolution), sc,
                       budget_bytes)


def _named_gpus(gpus, gpu_files) -> list:
    """The GpuSpecs of ``gpus`` (none given: []); a name list that names nothing (``--gpu ''``,
    ``--gpu ',,'``) is refused in one line, never a prediction that silently models no GPU."""
    if gpus is None or (not isinstance(gpus, str) and len(gpus) == 0):
        return []
    return gpu_table(gpus, gpu_files)


@checked
def gpu_table(gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = ()) -> list:
    """GPU specs (``attnprof.profiler.gpu.table.GpuSpec``): the named ones, in order, or every
    known GPU. Known = the built-in table, ATTNPROF_GPUS's files, then ``gpu_files``. An
    unknown name or a bad file is a one-line UserError. Imports no torch."""
    from attnprof.profiler.gpu.table import load_gpus, resolve_gpus

    if gpus:
        return resolve_gpus([gpus] if isinstance(gpus, str) else list(gpus), gpu_files)
    return sorted(load_gpus(gpu_files).values(), key=lambda g: (g.memory_bytes, g.key))


# --- calibrate --------------------------------------------------------------------------------
@dataclass
class CalibrationRun:
    """This machine's calibration for the time model: the figures, and where they are cached."""

    calibration: Any  # attnprof.profiler.timemodel.calibrate.Calibration
    cached: bool  # read back from the cache, not measured now
    path: Path  # its cache file
    notes: list = field(default_factory=list)  # warnings for stderr (an unusable cached entry, replaced)

    def to_dict(self) -> dict:
        return {**self.calibration.to_dict(), "cached": self.cached, "path": str(self.path)}

    def text(self) -> str:
        from attnprof.profiler.timemodel.format import format_calibration

        return format_calibration(self.calibration, self.cached, self.path)


@checked
def calibrate(*, no_cache: bool = False, threads: Optional[int] = None) -> CalibrationRun:
    """Measure this machine's GEMM rate per dtype, fused-attention rate, memory bandwidth and
    per-op overhead (a few seconds, at most ~15) with ``threads`` torch threads (default
    torch's, as a sweep's timing pass), or read them from the cache (``no_cache``: measure
    again and overwrite it). A failed or implausible measurement is a CalibrationError
    (one line, exit 2), and nothing is cached."""
    from attnprof.profiler.forks import usable_cores
    from attnprof.profiler.timemodel.machine import calibration, path_of

    if threads is not None and threads < 1:
        raise UsageProblem(f"--threads must be a positive number, got {threads}")
    cores = usable_cores()
    if threads is not None and threads > cores:  # more would oversubscribe, and 100000 crashed torch's pool
        raise UsageProblem(f"--threads {threads} is more than the {cores} CPU(s) this process may use")
    notes: list = []
    cal, cached = calibration(threads, use_cache=not no_cache, warn=notes.append)
    return CalibrationRun(cal, cached, path_of(cal.key()), notes)


# --- sweep ------------------------------------------------------------------------------------
@dataclass
class SweepRun:
    """One sweep: where it went, what it ran with, and what came of it."""

    out: Path
    scenario: Scenario
    device: str  # resolved: cpu | cuda | cuda:N (auto with executor ray: the cluster decides)
    mem_limit_bytes: Optional[int]  # None: each point's own device's memory (executor ray)
    summary: Any = None  # attnprof.profiler.runner.sweep.SweepSummary, once the sweep ran
    parts: list = field(default_factory=list)  # gpu_types: one run folder per GPU type, under out
    report_path: Optional[Path] = None
    capacity_s: Optional[float] = None  # seconds the report's capacity predictions took
    capacity_predictions: int = 0

    @property
    def interrupted(self) -> bool:
        return bool(self.summary is not None and self.summary.interrupted)

    @property
    def exit_code(self) -> int:
        """0, or 128 + the signal that stopped the sweep (130 Ctrl-C, 143 SIGTERM)."""
        if not self.interrupted:
            return 0
        return 128 + (getattr(self.summary, "interrupted_by", None) or 2)

    @property
    def results_path(self) -> Path:
        from attnprof.profiler.runner.storage import RESULTS_FILE

        return self.out / RESULTS_FILE

    def records(self) -> list[dict]:
        """Every record in the run folder (earlier runs' too, with ``resume``)."""
        from attnprof.profiler.runner.storage import read_records

        return [r for folder in self.folders() for r in read_records(folder)]

    def folders(self) -> list[Path]:
        """The run folder, or with ``gpu_types`` the run folder of each GPU type."""
        return list(self.parts) or [self.out]


@checked
def sweep(scenario: Union[PathLike, Scenario, None] = DEFAULT_SCENARIO, *,
          variants: Union[str, Sequence[str], None] = None, modes: Union[str, Sequence[str], None] = None,
          scope: Optional[str] = None, batch: Optional[int] = None, heads: Optional[int] = None,
          head_dim: Optional[int] = None, d_model: Optional[int] = None, layers: Optional[int] = None,
          dtype: Optional[str] = None, seq_lens: Optional[Sequence[int]] = None, min_len: Optional[int] = None,
          max_len: Optional[int] = None, tokens_per_batch: Optional[int] = None, ff_chunks: Optional[int] = None,
          forward_only: Optional[bool] = None, repeats: Optional[int] = None, warmup: Optional[int] = None,
          point_timeout_s: Optional[float] = None, device: str = "auto", mem_limit: Union[str, int, None] = None,
          out: Optional[PathLike] = None, resume: bool = False, report: bool = True,
          capacity_seconds: float = CAPACITY_SECONDS, progress: bool = True,
          on_start: Optional[Callable[[SweepRun], None]] = None, log: Log = _quiet,
          gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = (),
          executor: str = "local", parallel: Optional[int] = None, ray_address: Optional[str] = None,
          ray_cpus_per_point: Optional[float] = None, gpu_types: Union[str, Sequence[str], None] = None) -> SweepRun:
    """Measure every variant x mode x length, each point in its own process, into ``out``
    (default ``runs/sweep-TIMESTAMP``): ``results.jsonl``, ``manifest.json`` and, with
    ``report``, ``report.html`` after the capacity predictions it needs.

    ``device`` auto | cpu | cuda | cuda:N. ``mem_limit`` ('12GiB' or bytes): points
    predicted above it are skipped (default: 80% of free RAM, or the GPU's memory).
    ``on_start(run)`` is called once everything is checked, before the first point.
    Ctrl-C (or SIGTERM) keeps every finished point: the run comes back with
    ``interrupted`` set and no report; ``resume=True`` completes it.

    ``gpus`` (GPU table keys, ``gpu_table``): the report's "what fits where" and capacity
    chart are per named GPU, by the GPU memory model (predicted, never measured), and the
    capacity phase models those GPUs; the figures go to the report's cache file, never
    into results.jsonl. ``gpu_files``: more GPUs (TOML).

    ``executor`` local | ray (docs/scaling-out.md): ``parallel`` points at once on this
    machine (default one per visible GPU, 1 on a CPU); or each point a Ray task on the
    cluster at ``ray_address`` (default RAY_ADDRESS, a running local cluster, else a new
    local one), one GPU or ``ray_cpus_per_point`` CPUs each. ``gpu_types`` (Ray; "all" or
    names such as "H100,A100"): the sweep once per GPU type, into ``out/<TYPE>/``.
    """
    from datetime import datetime

    from attnprof.profiler.predict import cache
    from attnprof.profiler.runner.sweep import SweepSettings, resolve_device, run_sweep

    specs = _named_gpus(gpus, gpu_files)  # unknown names fail before any work
    sc = build_scenario(DEFAULT_SCENARIO if scenario is None else scenario, variants=variants, modes=modes,
                        scope=scope, batch=batch, heads=heads, head_dim=head_dim, d_model=d_model, layers=layers,
                        dtype=dtype, seq_lens=seq_lens, min_len=min_len, max_len=max_len,
                        tokens_per_batch=tokens_per_batch, ff_chunks=ff_chunks,
                        forward_only=forward_only, repeats=repeats, warmup=warmup,
                        point_timeout_s=point_timeout_s)
    if capacity_seconds < 0:
        raise UsageProblem(f"capacity_seconds must not be negative, got {capacity_seconds}")
    if ray_cpus_per_point is not None and executor != "ray":
        raise UsageProblem("--ray-cpus-per-point is for --executor ray; this machine's sweep would ignore it")
    limit = _bytes(mem_limit, "--mem-limit") if mem_limit is not None else None
    if executor == "ray":  # the cluster's devices, not this machine's, decide the device and its memory
        from attnprof.profiler.runner.executors.ray_cluster import require_ray

        require_ray()  # one line naming the extra, before any folder exists
        _check_ray_address(ray_address)
        resolved, default_limit = device, None
    else:
        resolved = resolve_device(device)
        default_limit = default_memory_limit(resolved)
    run = SweepRun(Path(out) if out is not None else Path("runs") / f"sweep-{datetime.now():%Y%m%d-%H%M%S}",
                   sc, resolved, limit if limit is not None else default_limit)
    settings = SweepSettings(device=resolved, mem_limit_bytes=run.mem_limit_bytes, warmup=sc.warmup,
                             repeats=sc.repeats, point_timeout_s=sc.point_timeout_s, executor=executor,
                             parallel=parallel, ray_address=ray_address,
                             ray_cpus_per_point=1.0 if ray_cpus_per_point is None else ray_cpus_per_point,
                             mem_limit_from_device=limit is None)
    _check_run_folder(run, resume, report)
    cache.check_folder()  # its one warning before the banner and any point's process
    if on_start:
        on_start(run)
    if gpu_types:
        from attnprof.profiler.runner.sweep import run_by_gpu_type

        run.summary, run.parts = run_by_gpu_type(sc, run.out, settings, list(_listed(gpu_types)), resume=resume,
                                                 show_progress=progress)
    else:
        run.summary = run_sweep(sc, run.out, settings, resume=resume, show_progress=progress)
    if report and not run.interrupted:
        for folder in run.folders():
            run.capacity_predictions, run.capacity_s = capacity_for_report(sc, folder, capacity_seconds, log, specs)
            run.report_path = _render(folder, None, None, seconds=REPORT_SECONDS, gpus=specs, log=log)
        if run.parts:  # one page with every GPU type side by side (reports read OUT/gpu-types.json)
            run.report_path = _render(run.out, None, None, seconds=REPORT_SECONDS, gpus=specs, log=log)
    return run


def _check_ray_address(ray_address: Optional[str]) -> None:
    """The cluster's address (given, or RAY_ADDRESS): its syntax, and that something answers
    there, before the banner and before a run folder exists (so a typo leaves nothing)."""
    import os

    from attnprof.profiler.runner.executors.ray_address import probe

    address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        probe(address)


@checked
def default_memory_limit(device: str) -> int:
    """What a sweep may plan for: 80% of available RAM, or the GPU's total memory."""
    from attnprof.profiler.measure.gpu import default_memory_limit_bytes

    return default_memory_limit_bytes(device)


def _check_run_folder(run: SweepRun, resume: bool, report: bool = True) -> None:
    """The sweep's own refusals, made before anything is printed or written: a folder that
    cannot be written (read-only, a name too long, a file in the way), a planted link, a
    results file without a valid record, a corrupt manifest, another scenario."""
    from attnprof.profiler import safeio
    from attnprof.profiler.runner.manifest import check_manifest_readable, check_resumable
    from attnprof.profiler.runner.quarantine import resume_problem
    from attnprof.profiler.runner.storage import read_records, refuse_planted_links, results_size
    from attnprof.profiler.runner.sweep import SweepError

    safeio.check_folder_writable(run.out, "the run folder")  # a file in the way, too
    if not run.out.is_dir():
        return
    refuse_planted_links(run.out)
    if report:  # the render at the end writes these: refused now, not after every point has run
        from attnprof.reports.render_cache import RENDER_FILES

        for name in RENDER_FILES:
            safeio.refuse_link(run.out / name)
            safeio.refuse_link(run.out / (name + ".tmp"))
    if results_size(run.out) and not resume:
        raise SweepError(f"{run.out} already holds results; pass --resume to complete it, or choose another --out")
    if resume:
        problem = resume_problem(run.out)
        if problem:
            raise SweepError(problem)
        check_manifest_readable(run.out)
        existing = read_records(run.out)
        if existing:
            check_resumable(run.out, run.scenario, run.device)


@checked
def capacity_for_report(sc: Scenario, out: Path, seconds: float = CAPACITY_SECONDS,
                        log: Log = _quiet, gpus: Sequence = ()) -> tuple[int, float]:
    """Predict, within about ``seconds``, the lengths that decide the report's "longest
    length that fits" table, so its figures are predictions rather than extrapolations.

    Series run in parallel (fake tensors, ~70 s for the whole default scenario on 2
    cores); what is unfinished when the time is up is left out, and the report marks
    those figures '~' (extrapolated). Returns (predictions made, seconds taken).
    ``gpus`` (GpuSpecs): model those GPUs instead of the generic budgets (the GPU memory
    model's figures, one per point and GPU, into the report's GPU cache file).
    """
    from attnprof.profiler.predict.curve import capacity_within
    from attnprof.reports.capacity import BUDGETS_GIB, add_gpu_predictions, add_predictions

    started = time.perf_counter()
    if seconds <= 0:
        return 0, 0.0
    if gpus:
        log(f"modelling the longest length that fits {', '.join(g.key for g in gpus)} for the report "
            f"(GPU memory model, at most ~{seconds:.0f} s) ...")
        entries = capacity_within(sc, tuple(BUDGETS_GIB), seconds, list(gpus))
        add_gpu_predictions(out, list(gpus), entries, warn=log)
    else:
        log(f"predicting the longest length that fits {min(BUDGETS_GIB)}-{max(BUDGETS_GIB)} GiB for the report "
            f"(fake tensors, at most ~{seconds:.0f} s) ...")
        entries = capacity_within(sc, tuple(BUDGETS_GIB), seconds)
        add_predictions(out, entries, warn=log)
    took = time.perf_counter() - started
    log(f"  {len(entries)} predictions in {took:.1f} s")
    return len(entries), took


# --- report -----------------------------------------------------------------------------------
@checked
def report(run_dir: PathLike, *, output: Optional[PathLike] = None, baseline: Optional[PathLike] = None,
           seconds: float = REPORT_SECONDS, gpus: Union[str, Sequence[str], None] = None,
           gpu_files: Sequence[PathLike] = (), no_cache: bool = False, log: Log = _quiet) -> Path:
    """Write the self-contained HTML report of a run folder (default ``RUN_DIR/report.html``)
    with PNG charts beside it, optionally against a ``baseline`` run folder; return its
    path. ``seconds``: time for capacity predictions the run lacks (0 = none). ``gpus``
    (GPU table keys): "what fits where" and the capacity chart per named GPU, by the GPU
    memory model, instead of the generic budgets; ``gpu_files``: more GPUs (TOML).
    ``no_cache``: its predictions neither read nor write the persistent prediction cache.
    ``log`` gets one warning line for invalid records left out (the page notes them too)
    and for a render cache with invalid entries (ignored and rewritten)."""
    from attnprof.profiler.predict import cache

    specs = _named_gpus(gpus, gpu_files)  # unknown names fail before any work
    if seconds < 0:
        raise UsageProblem(f"--seconds must not be negative, got {seconds}")
    with cache.disabled() if no_cache else contextlib.nullcontext():
        cache.check_folder()
        return _render(Path(run_dir), output, baseline, seconds, specs, log)


def _render(run_dir: Path, output: Optional[PathLike], baseline: Optional[PathLike], seconds: float,
            gpus: Sequence = (), log: Log = _quiet) -> Path:
    from attnprof.reports.render import render_report

    return render_report(Path(run_dir), Path(output) if output is not None else None,
                         Path(baseline) if baseline is not None else None, seconds=seconds, gpus=list(gpus),
                         warn=log)


# --- gate -------------------------------------------------------------------------------------
@dataclass
class GateRun:
    """The gate's verdict: ``exit_code`` 0 pass, 1 a memory regression, 2 not comparable."""

    exit_code: int
    run_dir: Path
    lines: list = field(default_factory=list)  # what `attnprof gate` prints ('error: ...' on stderr)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


@checked
def gate(run_dir: Optional[PathLike] = None, *, baseline: PathLike, tolerance: Union[str, float] = "2%",
         abs_tolerance: Union[str, int] = "64KiB", allow_missing: bool = False,
         markdown: Optional[PathLike] = None, json_out: Optional[PathLike] = None, update: bool = False,
         run_scenario: Optional[str] = None, log: Log = _quiet, skip_invalid: bool = False) -> GateRun:
    """Compare a run's deterministic peak memory with a committed baseline JSON (or,
    with ``update``, write the baseline from the run). ``run_scenario`` first sweeps that
    scenario on the CPU into ``run_dir`` (default a temporary folder). Every line of the
    verdict goes to ``log`` as it comes and into ``GateRun.lines``. A run or baseline that
    holds an invalid record is not comparable (exit 2, naming file and line) unless
    ``skip_invalid``: then it is left out and the summary says how many were."""
    from attnprof.profiler.gate import run_gate

    if run_scenario is not None:
        run_dir = _gate_sweep(run_scenario, run_dir)
    if run_dir is None:
        raise UsageProblem("give RUN_DIR or --run SCENARIO")
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(str(line))
        log(str(line))

    code = run_gate(baseline, run_dir, tolerance_pct=tolerance, abs_tolerance_bytes=abs_tolerance,
                    allow_missing=allow_missing, markdown_file=markdown, json_file=json_out, update=update, out=out,
                    skip_invalid=skip_invalid)
    return GateRun(code, Path(run_dir), lines)


def _gate_sweep(scenario_name: str, run_dir: Optional[PathLike]) -> Path:
    import tempfile

    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep

    sc = load_scenario(scenario_name)
    out = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="attnprof-gate-"))
    settings = SweepSettings(device="cpu", warmup=sc.warmup, repeats=sc.repeats, point_timeout_s=sc.point_timeout_s)
    run_sweep(sc, out, settings, resume=True, show_progress=False)
    return out
