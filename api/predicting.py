"""``predict`` (peak memory, FLOPs and step time without allocating), the GPU table it
models, and ``calibrate`` (this machine's rates for the time model)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from attnprof.api.overrides import PathLike, build_scenario, overridable, scenario_warnings, to_bytes
from attnprof.arguments import UsageProblem, checked
from attnprof.scenarios.fields import FIELDS
from attnprof.scenarios.scenario import Scenario

PREDICT_LEN = 65536  # what `predict` predicts when no length is named
BUDGET_SHORTEST = 256  # where a --budget search starts when no --min-len is named


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
    timeline_files: list = field(default_factory=list)  # paths written by timeline= (snapshot, trace per point)

    def failed(self):
        """One line when some prediction failed (a record or a budget row with status ``error``),
        naming how many and the first reason; None when none did."""
        reasons = [r.get("reason") or "no reason given" for r in self.records if r.get("status") == "error"]
        reasons += [f"{r.get('gpu')}: {r.get('gpu_note')}" for r in self.records if r.get("gpu_status") == "error"]
        if not reasons:
            return None
        return f"{len(reasons)} of {len(self.records)} predictions failed; the first: {reasons[0]}"

    def table(self) -> str:
        from attnprof.profiler.predict.points import format_table

        if self.gpu_labels:  # the records keep the key (data); the table shows the label
            return replace(self, records=[{**r, "gpu": self.gpu_labels.get(r.get("gpu"), r.get("gpu"))}
                                          if "gpu" in r else r for r in self.records],
                           gpus=[self.gpu_labels.get(k, k) for k in self.gpus], gpu_labels={}).table()
        if self.sort == "time":
            from attnprof.profiler.timemodel.time_format import format_ranking

            return format_ranking(self.records, gpus=self.gpus, memory_limit_bytes=self.memory_limit_bytes)
        if not self.gpus:
            text = format_table(self.records, self.budget_bytes)
            if self.budget_bytes is None:
                from attnprof.profiler.timemodel.time_format import format_time_table

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
@overridable([f for f in FIELDS if f.for_predict])
def predict(scenario: Union[PathLike, Scenario, None] = None, *, budget: Union[str, int, None] = None,
            gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = (),
            resolution: Optional[int] = None, no_cache: bool = False, sort: Optional[str] = None,
            timeline: Optional[PathLike] = None, **overrides) -> Predictions:
    """Peak memory and FLOPs of each point without allocating (fake tensors, any machine).
    The scenario's keywords are ``build_scenario``'s, less the measurement ones.

    Without a scenario or lengths it predicts every variant at 65536 tokens. ``budget``
    ('80GiB' or bytes): per series, the longest power-of-two length whose predicted peak
    fits, searched from ``min_len`` (default 256) up to ``max_len`` (default 1M); with
    ``resolution`` (tokens), the longest multiple of it that fits, by a search over exact
    predictions (``longest_fitting``). ``no_cache``: neither read nor write the persistent
    prediction cache (profiler/predict/cache.py).

    ``gpus`` (GPU table keys, ``gpu_table``): also run the GPU memory model, one record
    per point x GPU with the ``gpu_*`` fields (predicted allocator peaks and total; see
    docs/gpu.md) and ``gpu_checked``: how close the models came on a real GPU for such a
    point, or why they were never checked there (profiler/hardware/checked.py). With ``budget`` too: per series and GPU, the longest length whose
    modelled total fits both the GPU's memory and the budget. ``gpu_files``: more GPUs
    (TOML), after ATTNPROF_GPUS's.

    Without ``budget``, each record also has its predicted step time on this machine's CPU
    (``predicted_time_fwd_ms`` / ``_bwd_ms``; calibrated on first use, ``calibrate``) and,
    with ``gpus``, on each GPU (``gpu_time_fwd_ms`` / ``_bwd_ms``, ``gpu_tokens_per_s``).
    ``sort="time"``: ``table()`` ranks the points that fit (the GPU's memory with ``gpus``,
    else this machine's) by predicted step time, fastest first.

    ``timeline`` (a folder): also write, per point that fits (and per GPU with ``gpus``),
    its predicted memory snapshot and Chrome trace (profiler/timeline/, docs/timelines.md);
    the folder is checked before any work, and the files are listed in ``timeline_files``.
    """
    from attnprof.profiler.predict import cache

    if sort not in (None, "time"):
        raise UsageProblem(f"--sort {sort!r}: the one order is 'time'")
    if sort and budget is not None:
        raise UsageProblem("--sort time ranks the points at the lengths given; leave out --budget")
    if overrides.get("seq_lens") and budget is not None:
        raise UsageProblem("--budget searches the lengths from --min-len to --max-len; --seq-len would be ignored")
    if timeline is not None:
        if budget is not None:
            raise UsageProblem("--timeline writes the points at the lengths given; leave out --budget")
        from attnprof.profiler.timeline.files import check_folder

        check_folder(timeline)
    if resolution is not None:
        if resolution <= 0:
            raise UsageProblem(f"--resolution must be a positive number of tokens, got {resolution}")
        if budget is None:
            raise UsageProblem("--resolution goes with --budget: the longest length that fits, at that resolution")
        if gpus:
            raise UsageProblem("--resolution is not available with --gpu; leave out one of them")
    with cache.disabled() if no_cache else contextlib.nullcontext():
        cache.check_folder()  # its one warning before any worker starts
        result = _predictions(scenario, overrides, budget=budget, gpus=gpus, gpu_files=gpu_files,
                              resolution=resolution, sort=sort, timeline=timeline is not None)
    if timeline is not None:
        from attnprof.api.timelines import write_timelines

        result.timeline_files = write_timelines(result, timeline, named_gpus(gpus, gpu_files))
    return result


def _predictions(scenario, overrides: dict, *, budget, gpus, gpu_files, resolution, sort=None,
                 timeline: bool = False) -> Predictions:
    from attnprof.profiler.predict.points import longest_fitting

    budget_bytes = to_bytes(budget, "--budget") if budget is not None else None
    specs = named_gpus(gpus, gpu_files)  # unknown names fail before any work
    # a budget searches from --min-len (default 256) to --max-len (default 1M): its defaults, not PREDICT_LEN's
    from attnprof.profiler.predict.points import LONGEST_SEARCHED

    base = Scenario(min_len=PREDICT_LEN, max_len=PREDICT_LEN) if budget_bytes is None else (
        Scenario(min_len=BUDGET_SHORTEST, max_len=LONGEST_SEARCHED))
    sc = build_scenario(scenario, base=base, **overrides)
    said = scenario_warnings(sc)  # issue 24: a config key this build could not apply, variants left out
    min_len, max_len = overrides.get("min_len"), overrides.get("max_len")
    keys = [g.key for g in specs]
    labels = {g.key: g.label for g in specs if g.label != g.key}
    start = 1 << max(0, (min_len or BUDGET_SHORTEST) - 1).bit_length()  # the first power of two >= min_len
    if budget_bytes is None:
        from functools import partial

        from attnprof.scenarios.plan import series
        from attnprof.profiler.predict.points import point_key, prediction_record
        from attnprof.profiler.predict.pool import spread
        from attnprof.profiler.timemodel.machine import machine_rates

        notes: list = list(said)
        # this CPU's step times: from its cached calibration; measured first (~3 s) only when
        # asked to rank by time, so a plain prediction stays at planning speed
        rates = machine_rates(warn=notes.append, measure=(sort == "time" or timeline) and not specs)
        if rates is None and not (sort == "time" and not specs) and not notes:
            from attnprof.profiler.timemodel.machine import cache_unusable

            cached = "" if cache_unusable() else ", cached"  # never a promise the cache folder cannot keep
            notes.append(f"note: step times on this CPU: run `attnprof calibrate` once (a few seconds{cached})")
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
                           budget_bytes, gpus=keys, gpu_labels=labels, notes=said)
    return Predictions(longest_fitting(sc, budget_bytes, start=start, limit=max_len, resolution=resolution), sc,
                       budget_bytes, notes=said)


def named_gpus(gpus, gpu_files) -> list:
    """The GpuSpecs of ``gpus`` (none given: []); a name list that names nothing (``--gpu ''``,
    ``--gpu ',,'``) is refused in one line, never a prediction that silently models no GPU; so
    are GPU files without a name to read them for."""
    if gpus is None or (not isinstance(gpus, str) and len(gpus) == 0):
        if gpu_files:
            raise UsageProblem("--gpu-file adds GPUs that --gpu NAME can name; without --gpu it would be ignored")
        return []
    return gpu_table(gpus, gpu_files)


@checked
def gpu_table(gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = ()) -> list:
    """GPU specs (``attnprof.profiler.hardware.gpus.GpuSpec``): the named ones, in order, or every
    known GPU. Known = the built-in table, ATTNPROF_GPUS's files, then ``gpu_files``. An
    unknown name or a bad file is a one-line UserError. Imports no torch."""
    from attnprof.profiler.hardware.gpus import load_gpus, resolve_gpus

    if gpus:
        return resolve_gpus([gpus] if isinstance(gpus, str) else list(gpus), gpu_files)
    return sorted(load_gpus(gpu_files).values(), key=lambda g: (g.memory_bytes, g.key))


# --- calibrate ----------------------------------------------------------------------------------
@dataclass
class CalibrationRun:
    """This machine's calibration for the time model: the figures, and where they are cached."""

    calibration: Any  # attnprof.profiler.timemodel.calibrate.Calibration
    cached: bool  # read back from the cache, not measured now
    path: Optional[Path]  # its cache file; None when it could not be cached (a warning in notes says why)
    notes: list = field(default_factory=list)  # warnings for stderr (an unusable cached entry, replaced)

    def to_dict(self) -> dict:
        return {**self.calibration.to_dict(), "cached": self.cached, "path": None if self.path is None else str(self.path)}

    def text(self) -> str:
        from attnprof.profiler.timemodel.time_format import format_calibration

        return format_calibration(self.calibration, self.cached, self.path)


@checked
def calibrate(*, no_cache: bool = False, threads: Optional[int] = None) -> CalibrationRun:
    """Measure this machine's GEMM rate per dtype, fused-attention rate, memory bandwidth and
    per-op overhead (a few seconds, at most ~15) with ``threads`` torch threads (default
    torch's, as a sweep's timing pass), or read them from the cache (``no_cache``: measure
    again and overwrite it). A failed or implausible measurement is a CalibrationError
    (one line, exit 2), and nothing is cached."""
    from attnprof.profiler.forks import usable_cores
    from attnprof.profiler.timemodel.machine import calibration, stored_at

    if threads is not None and threads < 1:
        raise UsageProblem(f"--threads must be a positive number, got {threads}")
    cores = usable_cores()
    if threads is not None and threads > cores:  # more would oversubscribe, and 100000 crashed torch's pool
        raise UsageProblem(f"--threads {threads} is more than the {cores} CPU(s) this process may use")
    notes: list = []
    cal, cached = calibration(threads, use_cache=not no_cache, warn=notes.append)
    return CalibrationRun(cal, cached, stored_at(cal), notes)


@checked
def default_memory_limit(device: str) -> int:
    """What a sweep may plan for: 80% of available RAM, or the GPU's total memory."""
    from attnprof.profiler.measure.host import default_memory_limit_bytes

    return default_memory_limit_bytes(device)
