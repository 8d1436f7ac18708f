"""`attnprof sweep`: every point of a scenario in its own process, nothing ever lost.

Each point is forked from a warm helper that has torch imported (``isolation``), so an
OOM, a crash (SIGKILL, segfault) or a hang past ``--point-timeout`` becomes that point's
status and the sweep moves on. Each record is appended and on disk as soon as it
exists; Ctrl-C or SIGTERM stop the sweep within a second, even mid-point, keeping
every finished point, and ``--resume`` completes the rest. One sweep writes a run
folder at a time (a lock), and a folder from outside is checked, never trusted:
invalid lines are reported and skipped, a torn last line is cut off, and nothing
named in it is ever imported; only the scenario given now decides what runs.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler.measure.accounting import predict
from attnprof.profiler.runner.interrupts import Interrupted, Interrupts
from attnprof.profiler.runner.isolation import PointRunner
from attnprof.profiler.runner.manifest import check_resumable, write_manifest
from attnprof.profiler.runner.plan import series, shape_problem
from attnprof.profiler.records import Point, PointRecord, key_of_record
from attnprof.profiler.runner.progress import Progress
from attnprof.profiler.runner.storage import (RESULTS_FILE, RunFolderBusy, acquire_lock, append_record,
                                              read_records_checked, release_lock, repair_tail, results_size)
from attnprof.profiler.units import fmt_bytes
from attnprof.scenarios.scenario import Scenario
from attnprof.profiler.runner.errors import StorageError, SweepError

SLOPE_RANGE = (1.0, 2.5)  # time exponents we allow when extrapolating a series
MAX_PROBLEM_LINES = 5  # invalid lines of results.jsonl named one by one on resume; the rest as a count
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS}

__all__ = ["SweepError", "StorageError", "SweepSettings", "SweepSummary", "PointRunner", "run_sweep"]


@dataclass
class SweepSettings:
    device: str = "cpu"  # resolved: cpu | cuda | cuda:N
    device_name: str = ""
    mem_limit_bytes: Optional[int] = None
    warmup: int = 1
    repeats: int = 3
    point_timeout_s: float = 300.0
    threads: Optional[int] = None
    test_hook: str = field(default_factory=lambda: os.environ.get("ATTNPROF_TEST_HOOK", ""))

    def __post_init__(self):
        """Checked once, whoever builds them: a NaN or infinite timeout would never fire."""
        t = self.point_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise SweepError(f"--point-timeout must be a finite positive number of seconds, got {t!r}")
        for name, low in (("repeats", 1), ("warmup", 0), ("mem_limit_bytes", 0), ("threads", 1)):
            value = getattr(self, name)
            if value is None and name in ("mem_limit_bytes", "threads"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SweepError(f"{name} must be an integer >= {low}, got {value!r}")

    def for_child(self) -> dict:
        return dict(self.__dict__)


def extrapolate_s(done: list[tuple[int, float]], seq_len: int) -> Optional[float]:
    """Wall time of the next point of a series, from its last two finished points."""
    if not done:
        return None
    n1, t1 = done[-1]
    slope = 2.0
    if len(done) >= 2:
        n0, t0 = done[-2]
        if t0 > 0 and t1 > 0 and n1 != n0:
            import math

            slope = math.log(t1 / t0) / math.log(n1 / n0)
    slope = min(max(slope, SLOPE_RANGE[0]), SLOPE_RANGE[1])
    return t1 * (seq_len / n1) ** slope


def _skipped(point: Point, settings: SweepSettings, reason: str, status: str = "skipped") -> PointRecord:
    record = PointRecord(**point.identity(), status=status, reason=reason, device=settings.device,
                         device_name=settings.device_name)
    if not shape_problem(point):
        try:
            acc = predict(point)
        except Exception as exc:  # noqa: BLE001 - e.g. a plug-in that breaks under fake tensors
            from attnprof.profiler.runner.worker import one_line

            record.reason += f"; no prediction either: {one_line(exc)}"
            return record
        record.predicted_peak_bytes, record.predicted_breakdown_bytes = acc.peak_bytes, acc.breakdown_bytes
        record.flops_fwd, record.flops_bwd = acc.flops_fwd, acc.flops_bwd
    return record


@dataclass
class SweepSummary:
    out_dir: Path
    records: list = field(default_factory=list)  # this invocation's new records
    kept: int = 0  # records already there (resume)
    wall_s: float = 0.0
    interrupted: bool = False
    interrupted_by: Optional[int] = None  # the signal that stopped it (SIGINT for a KeyboardInterrupt)

    @property
    def compute_s(self) -> float:
        """Time spent inside the points' processes (prediction, memory pass, timing)."""
        return sum(r.get("point_wall_s") or 0.0 for r in self.records)

    @property
    def timed_s(self) -> float:
        """Only the timed forward and backward passes themselves."""
        return sum(sum(r.get("time_fwd_samples_ms") or []) + sum(r.get("time_bwd_samples_ms") or [])
                   for r in self.records) / 1e3


def run_sweep(scenario: Scenario, out_dir: Path, settings: SweepSettings, *, resume: bool = False,
              show_progress: bool = True, on_record: Optional[Callable[[dict], None]] = None) -> SweepSummary:
    """Measure every point of ``scenario`` not yet in ``out_dir``.

    Returns with ``interrupted`` set (and ``interrupted_by`` the signal) after Ctrl-C or
    SIGTERM; raises SweepError (exit 2) when it cannot start, StorageError (exit 1)
    when the folder cannot be written; every record written before is kept either way.
    """
    out_dir = Path(out_dir)
    plan = series(scenario)  # a PlanError before anything is created
    total = sum(len(s) for s in plan)
    summary = SweepSummary(out_dir)
    started = time.perf_counter()
    progress: Optional[Progress] = None
    with Interrupts() as interrupts, _locked(out_dir):
        runner = PointRunner(interrupts)
        try:
            interrupts.check()
            done = _prepare(out_dir, scenario, settings, resume)
            summary.kept = sum(1 for s in plan for p in s if p.key() in done)
            progress = Progress(total, enabled=show_progress, already=summary.kept)
            for points in plan:
                _run_series(points, done, settings, runner, interrupts, progress, summary, on_record)
        except Interrupted as exc:
            summary.interrupted, summary.interrupted_by = True, exc.signum
        except KeyboardInterrupt:  # raised by code (on_record), or outside the main thread
            summary.interrupted, summary.interrupted_by = True, int(signal.SIGINT)
        finally:
            runner.close()
            summary.wall_s = time.perf_counter() - started
            if progress is not None:
                progress.close()
    return summary


def _run_series(points: list[Point], done: dict, settings: SweepSettings, runner: PointRunner,
                interrupts: Interrupts, progress: Progress, summary: SweepSummary,
                on_record: Optional[Callable[[dict], None]]) -> None:
    """One variant x mode, lengths ascending: after an OOM or a timeout, longer lengths are skipped."""
    out_dir = summary.out_dir
    stopped_at: Optional[str] = None  # "OOM at n=..." once a series cannot go longer
    timings: list[tuple[int, float]] = []
    for point in points:
        n = point.shape.seq_len
        if point.key() in done:
            rec = done[point.key()]
            stopped_at = stopped_at or _stop_reason(rec)
            if rec.get("status") == "ok" and rec.get("point_wall_s"):
                timings.append((n, rec["point_wall_s"]))
            continue
        interrupts.check()
        progress.start(point)
        problem = shape_problem(point)
        estimate = extrapolate_s(timings, n)
        if problem:
            record = _skipped(point, settings, problem).to_row()
        elif stopped_at:
            record = _skipped(point, settings, f"not run: {stopped_at} in this series").to_row()
        elif estimate is not None and estimate > settings.point_timeout_s:
            record = _skipped(point, settings, f"extrapolated {estimate:.0f} s from this series exceeds "
                                               f"--point-timeout {settings.point_timeout_s:g} s").to_row()
        else:
            record = runner.run(point, settings)
            if "variant" not in record:  # timeout / crash: build the record here
                record = _skipped(point, settings, record["reason"], record["status"]).to_row()
        append_record(out_dir, PointRecord.from_dict(record))
        summary.records.append(record)
        if on_record:
            on_record(record)
        progress.finish(point, record)
        stopped_at = stopped_at or _stop_reason(record)
        if record["status"] == "ok" and record.get("point_wall_s"):
            timings.append((n, record["point_wall_s"]))


@contextmanager
def _locked(out_dir: Path):
    """The run folder, created if need be and locked against a second writer while the sweep runs."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = acquire_lock(out_dir)
    except RunFolderBusy as exc:
        raise SweepError(f"{out_dir} is being written by another sweep (pid {exc.holder}); "
                         f"wait for it to finish, or choose another --out") from None
    except OSError as exc:
        raise _folder_error(out_dir, exc) from None
    try:
        yield
    finally:
        release_lock(fd)


def _prepare(out_dir: Path, scenario: Scenario, settings: SweepSettings, resume: bool) -> dict:
    """Check, repair and read what the folder holds; write the manifest. -> {key: record} done."""
    if not resume and results_size(out_dir):
        raise SweepError(f"{out_dir} already holds results; pass --resume to complete it, or choose another --out")
    existing: list[dict] = []
    if resume:
        note = repair_tail(out_dir)
        if note:
            print_stderr(note)
        existing, problems = read_records_checked(out_dir)
        for problem in problems[:MAX_PROBLEM_LINES]:
            print_stderr(f"warning: {out_dir / RESULTS_FILE} {problem}; ignored")
        if len(problems) > MAX_PROBLEM_LINES:
            print_stderr(f"warning: {len(problems) - MAX_PROBLEM_LINES} more invalid line(s) in "
                         f"{out_dir / RESULTS_FILE}; ignored")
        check_resumable(out_dir, scenario, settings.device, existing, warn=print_stderr)
    try:
        write_manifest(out_dir, scenario, settings)
    except OSError as exc:
        raise _folder_error(out_dir, exc) from None
    return {key_of_record(r): r for r in existing}


def _folder_error(out_dir: Path, exc: OSError) -> SweepError | StorageError:
    """A full or failing disk is StorageError (exit 1); a folder we may not write, SweepError (exit 2)."""
    text = f"cannot write the run folder {out_dir}: {exc.strerror or exc}"
    return StorageError(text) if exc.errno in _DISK_ERRNOS else SweepError(text)


def _stop_reason(record: dict) -> Optional[str]:
    status, n = record.get("status"), record.get("seq_len")
    if status == "oom":
        return f"out of memory at n={n}"
    if status == "timeout":
        return f"timed out at n={n}"
    if status == "skipped" and "exceeds the memory limit" in (record.get("reason") or ""):
        return f"predicted over the memory limit at n={n}"
    return None


def resolve_device(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SweepError(f"--device {device}: no CUDA device is available (torch {torch.__version__})")
        return device
    if device != "cpu":
        raise SweepError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return device


def describe_limit(limit: Optional[int]) -> str:
    return fmt_bytes(limit) if limit else "none"


def print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
