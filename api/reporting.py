"""``report`` (the HTML page of a run folder) and ``gate`` (a run's peak memory against
a committed baseline)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from attnprof.api.overrides import Log, PathLike, quiet
from attnprof.api.predicting import named_gpus
from attnprof.arguments import UsageProblem, checked
from attnprof.profiler.units import REPORT_SECONDS
from attnprof.scenarios.scenario import load_scenario


@checked
def report(run_dir: PathLike, *, output: Optional[PathLike] = None, baseline: Optional[PathLike] = None,
           seconds: float = REPORT_SECONDS, gpus: Union[str, Sequence[str], None] = None,
           gpu_files: Sequence[PathLike] = (), no_cache: bool = False, log: Log = quiet,
           timeline_points: Union[str, Sequence[str]] = ()) -> Path:
    """Write the self-contained HTML report of a run folder (default ``RUN_DIR/report.html``)
    with PNG charts beside it, optionally against a ``baseline`` run folder; return its
    path. ``seconds``: time for capacity predictions the run lacks (0 = none). ``gpus``
    (GPU table keys): "what fits where" and the capacity chart per named GPU, by the GPU
    memory model, instead of the generic budgets; ``gpu_files``: more GPUs (TOML).
    ``no_cache``: its predictions neither read nor write the persistent prediction cache.
    ``log`` gets one warning line for invalid records left out (the page notes them too)
    and for a render cache with invalid entries (ignored and rewritten).
    ``timeline_points``: point labels (``"sdpa plain n=1024"``, as the memory-over-a-step
    chart and the gate print them, or a series label + mode + ``n=N``) whose predicted
    memory over a step the report also draws; an unknown one is a one-line error."""
    from attnprof.profiler.predict import cache

    specs = named_gpus(gpus, gpu_files)  # unknown names fail before any work
    if not math.isfinite(seconds) or seconds < 0:  # nan passed the old `< 0` test
        raise UsageProblem(f"--seconds must be a finite number of seconds >= 0, got {seconds}")
    with cache.disabled() if no_cache else contextlib.nullcontext():
        cache.check_folder()
        names = [timeline_points] if isinstance(timeline_points, str) else list(timeline_points)
        return render(Path(run_dir), output, baseline, seconds, specs, log, timeline_points=names)


def render(run_dir: Path, output: Optional[PathLike], baseline: Optional[PathLike], seconds: float,
            gpus: Sequence = (), log: Log = quiet, timeline_points: Sequence[str] = ()) -> Path:
    from attnprof.reports.render import render_report

    return render_report(Path(run_dir), Path(output) if output is not None else None,
                         Path(baseline) if baseline is not None else None, seconds=seconds, gpus=list(gpus),
                         warn=log, timeline_points=list(timeline_points))


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
         run_scenario: Optional[str] = None, log: Log = quiet, skip_invalid: bool = False) -> GateRun:
    """Compare a run's deterministic peak memory with a committed baseline JSON (or,
    with ``update``, write the baseline from the run). ``run_scenario`` first sweeps that
    scenario on the CPU into ``run_dir`` (default a temporary folder). Every line of the
    verdict goes to ``log`` as it comes and into ``GateRun.lines``. A run or baseline that
    holds an invalid record is not comparable (exit 2, naming file and line) unless
    ``skip_invalid``: then it is left out and the summary says how many were."""
    from attnprof.profiler.gate import GateError, check_outputs, run_gate

    if run_scenario is not None:
        if not update:  # an output that cannot be written: refused before the sweep, not after it
            try:
                check_outputs(markdown, json_out)
            except GateError as exc:
                raise UsageProblem(str(exc)) from None
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
