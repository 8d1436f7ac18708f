"""``sweep``: measure every point of a scenario, each in its own process, then the
capacity predictions and the report it needs (``SweepRun`` says what came of it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from attnprof.api.capacity import CAPACITY_SECONDS, capacity_for_report
from attnprof.api.overrides import Log, PathLike, build_scenario, listed, overridable, quiet, scenario_warnings, to_bytes
from attnprof.api.predicting import default_memory_limit, named_gpus
from attnprof.api.reporting import REPORT_SECONDS, render
from attnprof.arguments import UsageProblem, checked
from attnprof.scenarios.scenario import Scenario

DEFAULT_SCENARIO = "default"  # what `sweep` measures when no scenario is named


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
    timeline_files: list = field(default_factory=list)  # timeline=True: the predicted files written

    @property
    def interrupted(self) -> bool:
        return bool(self.summary is not None and self.summary.interrupted)

    @property
    def exit_code(self) -> int:
        """0; 1 when no point of the run folder ended ok (``failure``); or 128 + the signal
        that stopped the sweep (130 Ctrl-C, 143 SIGTERM)."""
        if not self.interrupted:
            return 1 if self.failure() else 0
        return 128 + (getattr(self.summary, "interrupted_by", None) or 2)

    def failure(self) -> Optional[str]:
        """One line when the sweep ran to its end and no point of its run folder(s) ended ok
        (kept points of a --resume count): how many by status, and the commonest reason.
        None when a point was measured, or when the sweep was interrupted (resume completes it)."""
        if self.summary is None or self.interrupted:
            return None
        from attnprof.profiler.runner.failures import no_point_ok

        return no_point_ok(self.records())

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
@overridable()
def sweep(scenario: Union[PathLike, Scenario, None] = DEFAULT_SCENARIO, *, device: str = "auto",
          mem_limit: Union[str, int, None] = None, out: Optional[PathLike] = None, resume: bool = False,
          report: bool = True, capacity_seconds: float = CAPACITY_SECONDS, progress: bool = True,
          on_start: Optional[Callable[[SweepRun], None]] = None, log: Log = quiet,
          gpus: Union[str, Sequence[str], None] = None, gpu_files: Sequence[PathLike] = (),
          executor: str = "local", parallel: Optional[int] = None, ray_address: Optional[str] = None,
          ray_cpus_per_point: Optional[float] = None, gpu_types: Union[str, Sequence[str], None] = None,
          timeline: bool = False, **overrides) -> SweepRun:
    """Measure every variant x mode x length, each point in its own process, into ``out``
    (default ``runs/sweep-TIMESTAMP``): ``results.jsonl``, ``manifest.json`` and, with
    ``report``, ``report.html`` after the capacity predictions it needs. The scenario's
    keywords (``variants``, ``max_len``, ``repeats``, ...) are ``build_scenario``'s.

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

    ``timeline`` (executor local): each ok point's PREDICTED memory snapshot and Chrome trace
    (as ``predict(timeline=...)`` writes them; on CUDA for the GPU table's entry of the device,
    where it has one) into ``out/timelines/``, and on a CUDA device also its REAL snapshot, the
    caching allocator's history of its measured step, beside them as
    ``NAME.real.memory.pickle`` (pytorch.org/memory_viz opens both; ``compare_timelines``).
    """
    from datetime import datetime

    from attnprof.profiler.predict import cache
    from attnprof.profiler.runner.gpu_types import resolve_device
    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep

    specs = named_gpus(gpus, gpu_files)  # unknown names fail before any work
    sc = build_scenario(DEFAULT_SCENARIO if scenario is None else scenario, **overrides)
    for line in scenario_warnings(sc):  # issue 24: a config key not applied, variants left out
        log(line)
    if capacity_seconds < 0:
        raise UsageProblem(f"capacity_seconds must not be negative, got {capacity_seconds}")
    if ray_cpus_per_point is not None and executor != "ray":
        raise UsageProblem("--ray-cpus-per-point is for --executor ray; this machine's sweep would ignore it")
    limit = to_bytes(mem_limit, "--mem-limit") if mem_limit is not None else None
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
                             mem_limit_from_device=limit is None, timeline=timeline)
    if gpu_types:  # the executor's own refusals, before the banner and before any folder exists
        from attnprof.profiler.runner.gpu_types import check_gpu_types

        check_gpu_types(settings)
    elif executor != "ray":
        from attnprof.profiler.runner.executors.local import check_parallel

        check_parallel(settings)
    _check_run_folder(run, resume, report)
    if timeline:  # issue 25: a planted link where the snapshots go is refused before any work
        from attnprof.profiler import safeio
        from attnprof.profiler.gpumeasure.memory_history import TIMELINES_DIR

        safeio.refuse_link(run.out / TIMELINES_DIR)
    cache.check_folder()  # its one warning before the banner and any point's process
    if on_start:
        on_start(run)
    if gpu_types:
        from attnprof.profiler.runner.gpu_types import run_by_gpu_type

        run.summary, run.parts = run_by_gpu_type(sc, run.out, settings, list(listed(gpu_types)), resume=resume,
                                                 show_progress=progress)
    else:
        run.summary = run_sweep(sc, run.out, settings, resume=resume, show_progress=progress)
    if timeline and not run.interrupted:  # issue 25: the predicted side of every measured point
        from attnprof.api.timelines import write_run_timelines

        for folder in run.folders():
            run.timeline_files += write_run_timelines(sc, folder, log)
    if report and not run.interrupted:
        for folder in run.folders():
            run.capacity_predictions, run.capacity_s = capacity_for_report(sc, folder, capacity_seconds, log, specs)
            run.report_path = render(folder, None, None, seconds=REPORT_SECONDS, gpus=specs, log=log)
        if run.parts:  # one page with every GPU type side by side (reports read OUT/gpu-types.json)
            run.report_path = render(run.out, None, None, seconds=REPORT_SECONDS, gpus=specs, log=log)
    return run


def _check_ray_address(ray_address: Optional[str]) -> None:
    """The cluster's address (given, or RAY_ADDRESS): its syntax, and that something answers
    there, before the banner and before a run folder exists (so a typo leaves nothing)."""
    import os

    from attnprof.profiler.runner.executors.ray_address import probe

    address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        probe(address)


def _check_run_folder(run: SweepRun, resume: bool, report: bool = True) -> None:
    """The sweep's own refusals, made before anything is printed or written: a folder that
    cannot be written (read-only, a name too long, a file in the way), a planted link, a
    results file without a valid record, a corrupt manifest, another scenario."""
    from attnprof.profiler import safeio
    from attnprof.profiler.runner.manifest import check_manifest_readable, check_resumable
    from attnprof.profiler.runner.quarantine import resume_problem
    from attnprof.profiler.runner.storage import read_records, refuse_planted_links, results_size
    from attnprof.profiler.runner.sweep import SweepError

    safeio.check_folder_writable(run.out, "the run folder", probe=True)  # a file in the way, too
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
