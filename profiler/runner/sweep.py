"""`attnprof sweep`: every point of a scenario in its own process, nothing ever lost.

Each point runs in a worker forked from a warm helper that has torch imported (``isolation``; a
fresh process where a fork is unsafe: preload.py), so an OOM, a crash (SIGKILL, segfault) or a hang
past ``--point-timeout`` becomes that point's status and the sweep moves on. Each record is appended
and on disk as soon as it exists; Ctrl-C or SIGTERM stop the sweep within a second, even mid-point,
keeping every finished point, and ``--resume`` completes the rest. One sweep writes a run folder at
a time (a lock), and a folder from outside is checked, never trusted: invalid lines (a torn last
one included) are moved to results.quarantine.jsonl and reported, never deleted; nothing is written
through a planted link; and nothing named in it is ever imported: only the scenario given now
decides what runs.

Where the points run is the executor's business (``executors``: this machine, one point at a time or
one per GPU; or a Ray cluster); what runs, in which order, and every record written stay here, in
this process. A series (one variant x mode, lengths ascending) has at most one point in flight: its
next length starts once the previous one is recorded, so an OOM or a timeout still skips the longer
lengths; parallelism comes from running several series at once, the first ones of the plan first.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler import safeio
from attnprof.profiler.forks import usable_cores
from attnprof.profiler.runner.ahead import predict_ahead
from attnprof.profiler.runner.executors import EXECUTORS, Executor, make_executor
from attnprof.profiler.runner.failures import LOG_KEYS, write_log
from attnprof.profiler.runner.interrupts import Interrupted, Interrupts
from attnprof.profiler.runner.isolation import PointRunner
from attnprof.profiler.runner.manifest import check_manifest_readable, check_resumable, write_manifest
from attnprof.scenarios.plan import series, shape_problem
from attnprof.profiler.records import Point, PointRecord, key_of_record
from attnprof.profiler.runner.estimate import PREDICTED_TIMEOUT_MARGIN, add_prediction
from attnprof.profiler.runner.progress import Progress
from attnprof.profiler.runner.quarantine import quarantine_invalid
from attnprof.profiler.runner.run_folder import folder_error, locked
from attnprof.profiler.runner.storage import (RESULTS_FILE, append_record, read_records_checked,
                                              results_size)
from attnprof.profiler.units import fmt_bytes, printable
from attnprof.scenarios.scenario import Scenario
from attnprof.profiler.runner.errors import StorageError, SweepError

SLOPE_RANGE = (1.0, 2.5)  # time exponents we allow when extrapolating a series
MAX_PROBLEM_LINES = 5  # invalid lines of results.jsonl named one by one on resume; the rest as a count

__all__ = ["SweepError", "StorageError", "SweepSettings", "SweepSummary", "PointRunner", "run_sweep"]


@dataclass
class SweepSettings:
    device: str = "cpu"  # resolved: cpu | cuda | cuda:N (executor ray: also auto, resolved on the cluster)
    device_name: str = ""  # the device's name for its records (on a cluster each worker names its own)
    mem_limit_bytes: Optional[int] = None
    warmup: int = 1
    repeats: int = 3
    point_timeout_s: float = 300.0
    threads: Optional[int] = None
    # --- where the points run (executors/) ---
    executor: str = "local"  # local | ray
    parallel: Optional[int] = None  # local: points at once; None = one per visible GPU on cuda, 1 on cpu
    mem_limit_from_device: bool = False  # no --mem-limit given: each point's limit is its own device's memory
    ray_address: Optional[str] = None  # None: RAY_ADDRESS, a running local cluster, else a new local one
    ray_cpus_per_point: float = 1.0
    gpu_type: str = ""  # ray: run only on GPUs of this accelerator type (e.g. "H100")
    # --- the time model (runner/estimate.py): set by run_sweep, read by the workers ---
    time_rates: Optional[dict] = None  # this CPU's calibrated Rates (as a dict)
    time_gpu: str = ""  # the GPU table key of the CUDA device the points run on
    test_hook: str = field(default_factory=lambda: os.environ.get("ATTNPROF_TEST_HOOK", ""))
    # --- issue 25: real memory snapshots (sweep --timeline; gpumeasure/memory_history.py) ---
    timeline: bool = False  # CUDA: each point's allocator history into RUN/timelines/NAME.real.memory.pickle
    timeline_dir: str = ""  # set by run_sweep (RUN/timelines, checked), read by the workers

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
        if self.threads is not None and self.executor == "local" and self.threads > usable_cores():
            # more would oversubscribe the point being timed, and 100000 crashed torch's thread pool
            raise SweepError(f"threads {self.threads} is more than the {usable_cores()} CPU(s) this process may use")
        if self.executor not in EXECUTORS:
            raise SweepError(f"unknown executor {self.executor!r}; choose {' or '.join(EXECUTORS)}")
        if self.parallel is not None and (isinstance(self.parallel, bool) or not isinstance(self.parallel, int)
                                          or self.parallel < 1):
            raise SweepError(f"--parallel must be a positive number of points, got {self.parallel!r}")
        c = self.ray_cpus_per_point
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
            raise SweepError(f"--ray-cpus-per-point must be a positive number, got {c!r}")
        if self.executor != "ray" and (self.ray_address or self.gpu_type):
            raise SweepError("--ray-address and --gpu-types need --executor ray")
        if self.executor == "ray" and self.parallel is not None:
            raise SweepError("--parallel is for --executor local; on Ray every free GPU (or --ray-cpus-per-point "
                             "CPUs) of the cluster runs a point")
        self._check_timeline()

    def _check_timeline(self) -> None:
        """--timeline: the predicted timelines of every point (api/timelines.py), and on a CUDA
        device each point's real snapshot, written by its worker on this machine."""
        if self.timeline and self.executor == "ray":
            raise SweepError("--timeline writes each point's real memory snapshot into the run folder, which a "
                             "Ray worker on another node cannot reach; use --executor local")

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


def _skipped(point: Point, settings: SweepSettings, reason: str, status: str = "skipped", **where) -> PointRecord:
    """A record the sweep writes itself (a point not run, or one whose worker left none),
    with the prediction; ``where``: host, worker_pid, device_name where known."""
    record = PointRecord(**point.identity(), status=status, reason=reason, device=settings.device,
                         device_name=settings.device_name, host=socket.gethostname())
    for name, value in where.items():
        if value not in (None, "") and hasattr(record, name):
            setattr(record, name, value)
    add_prediction(record, point, settings)
    return record


@dataclass
class SweepSummary:
    out_dir: Path
    records: list = field(default_factory=list)  # this invocation's new records
    kept: int = 0  # records already there (resume)
    wall_s: float = 0.0
    ahead_s: float = 0.0  # predict_ahead's seconds (a CUDA sweep)
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
    from attnprof.profiler.gpumeasure.devices import prefer_pci_bus_order

    out_dir = Path(out_dir)
    plan = series(scenario)  # a PlanError before anything is created
    prefer_pci_bus_order()  # before any CUDA work here or in the helper and workers, which inherit it
    total = sum(len(s) for s in plan)
    summary = SweepSummary(out_dir)
    started = time.perf_counter()
    progress: Optional[Progress] = None
    with Interrupts() as interrupts, locked(out_dir):
        executor = make_executor(settings, interrupts, warn=print_stderr)
        try:
            interrupts.check()
            done = _prepare(out_dir, scenario, settings, resume, executor)
            _set_time_model(settings)
            summary.ahead_s = predict_ahead(plan, done, settings)  # a CUDA sweep: every prediction first
            if settings.timeline:  # issue 25: the workers write RUN/timelines/NAME.real.memory.pickle
                from attnprof.profiler.gpumeasure.memory_history import timelines_folder

                settings.timeline_dir = str(timelines_folder(out_dir).resolve())
            summary.kept = sum(1 for s in plan for p in s if p.key() in done)
            progress = Progress(total, enabled=show_progress, already=summary.kept)
            _run_plan(plan, done, settings, executor, interrupts, progress, summary, on_record)
        except Interrupted as exc:
            summary.interrupted, summary.interrupted_by = True, exc.signum
        except KeyboardInterrupt:  # raised by code (on_record), or outside the main thread
            summary.interrupted, summary.interrupted_by = True, int(signal.SIGINT)
        finally:
            executor.close()  # every point still in flight is stopped, its process gone
            summary.wall_s = time.perf_counter() - started
            if progress is not None:
                progress.close()
    return summary


def _set_time_model(settings: SweepSettings) -> None:
    """Calibrate this machine (first use: a few seconds, then cached) or find the GPU's table
    entry, once, here: the workers get the result in their settings."""
    from attnprof.profiler.runner.estimate import time_model_settings

    found = time_model_settings(settings, warn=print_stderr)
    settings.time_rates, settings.time_gpu = found.get("time_rates"), found.get("time_gpu", "")


@dataclass
class _Series:
    """One variant x mode, lengths ascending, as it is worked through: at most one point in
    flight, and after an OOM or a timeout the longer lengths are skipped."""

    points: list
    next: int = 0  # index of the first point not yet recorded or started
    running: bool = False
    stopped_at: Optional[str] = None  # "out of memory at n=..." once the series cannot go longer
    timings: list = field(default_factory=list)  # (n, point_wall_s) of its ok points

    def learn(self, record: dict) -> None:
        self.stopped_at = self.stopped_at or _stop_reason(record)
        if record.get("status") == "ok" and record.get("point_wall_s"):
            self.timings.append((record["seq_len"], record["point_wall_s"]))


def _run_plan(plan: list[list[Point]], done: dict, settings: SweepSettings, executor: Executor,
              interrupts: Interrupts, progress: Progress, summary: SweepSummary,
              on_record: Optional[Callable[[dict], None]]) -> None:
    """Keep the executor's slots busy with the plan's series, first series first, one
    point per series at a time; write each record as it comes (this process alone writes)."""
    lanes = [_Series(points) for points in plan]
    lane_of: dict[tuple, _Series] = {}
    child = settings.for_child()

    def write(point: Point, record: dict, lane: _Series) -> None:
        record = write_log(summary.out_dir, point, record)  # a failure's traceback into RUN/logs (issue 38)
        append_record(summary.out_dir, PointRecord.from_dict(record))
        summary.records.append(record)
        if on_record:
            on_record(record)
        progress.finish(point, record)
        lane.learn(record)
        if lane.timings:  # measured now: its series' later points by extrapolation
            for later in lane.points[lane.next:]:
                if later.key() not in done:
                    progress.expect(later, extrapolate_s(lane.timings, later.shape.seq_len))

    while True:
        for lane in lanes:
            if executor.busy() >= executor.slots:
                break
            if lane.running:
                continue
            point = _next_to_run(lane, done, settings, interrupts, progress, write)
            if point is not None:
                executor.submit(point, child)
                lane.running, lane_of[point.key()] = True, lane
        if not executor.busy():
            return  # every series is through: nothing runs, nothing is left to start
        finished_now = executor.wait()
        settings.device_name = executor.default_device_name()  # a cluster's tasks name their devices as they start
        for finished in finished_now:
            point, result = finished.point, finished.result
            lane = lane_of.pop(point.key())
            lane.running = False
            if "variant" not in result:  # timeout / crash / a Ray task's error: build the record here
                where = {k: result.get(k) for k in ("host", "worker_pid", "device_name")}
                tb = {k: v for k, v in result.items() if k in LOG_KEYS}  # a traceback, a dead worker's stderr
                result = {**_skipped(point, settings, result["reason"], result["status"], **where).to_row(), **tb}
            write(point, result, lane)


def _next_to_run(lane: _Series, done: dict, settings: SweepSettings, interrupts: Interrupts, progress: Progress,
                 write: Callable) -> Optional[Point]:
    """Walk the series to its next point to measure, writing on the way the records that
    need no worker (kept from before, shape problems, lengths past an OOM or a timeout)."""
    while lane.next < len(lane.points):
        point = lane.points[lane.next]
        lane.next += 1
        n = point.shape.seq_len
        if point.key() in done:
            lane.learn(done[point.key()])
            continue
        interrupts.check()
        progress.start(point)
        problem = shape_problem(point)
        estimate = extrapolate_s(lane.timings, n)
        if problem:
            write(point, _skipped(point, settings, problem).to_row(), lane)
        elif lane.stopped_at:
            write(point, _skipped(point, settings, f"not run: {lane.stopped_at} in this series").to_row(), lane)
        elif estimate is not None and estimate > settings.point_timeout_s:
            write(point, _skipped(point, settings, f"extrapolated {estimate:.0f} s from this series exceeds "
                                                   f"--point-timeout {settings.point_timeout_s:g} s").to_row(), lane)
        else:
            predicted = None if lane.timings else _expect_series(lane, point, done, settings, progress)
            if predicted is not None and predicted > settings.point_timeout_s * PREDICTED_TIMEOUT_MARGIN:
                write(point, _skipped(point, settings, f"predicted {predicted:.0f} s by the time model, over "
                                      f"{PREDICTED_TIMEOUT_MARGIN:g}x --point-timeout {settings.point_timeout_s:g} s "
                                      f"(no point of this series measured yet)").to_row(), lane)
                continue
            return point
    return None


def _expect_series(lane: _Series, point: Point, done: dict, settings: SweepSettings,
                   progress: Progress) -> Optional[float]:
    """Before a series has a measured point: the time model's wall time of ``point`` (None
    without a model), and the ETA's expectations for it and the series' later points (a
    power law between the model's times of ``point`` and of the series' longest point)."""
    from attnprof.profiler.runner.estimate import interpolate_s, point_seconds, predicted_step_ms

    child = settings.for_child()
    step_ms = predicted_step_ms(point, child)
    if step_ms is None:
        return None
    rest = [p for p in lane.points[lane.next - 1:] if p.key() not in done]
    known = [(point.shape.seq_len, point_seconds(step_ms, child))]
    if len(rest) > 1 and not shape_problem(rest[-1]):
        last_ms = predicted_step_ms(rest[-1], child)
        if last_ms is not None:
            known.append((rest[-1].shape.seq_len, point_seconds(last_ms, child)))
    for p in rest:
        progress.expect(p, interpolate_s(known, p.shape.seq_len))
    return known[0][1]


def _prepare(out_dir: Path, scenario: Scenario, settings: SweepSettings, resume: bool, executor: Executor) -> dict:
    """Check, repair and read what the folder holds; start the executor (connect to the
    cluster); write the manifest with the nodes and devices. -> {key: record} done."""
    if not resume and results_size(out_dir):
        raise SweepError(f"{out_dir} already holds results; pass --resume to complete it, or choose another --out")
    existing: list[dict] = []
    if resume:
        check_manifest_readable(out_dir)  # refused before anything in the folder changes
        note = quarantine_invalid(out_dir)  # refuses a file without a valid record; deletes nothing
        if note:
            print_stderr(note)
        existing, problems = read_records_checked(out_dir)
        for problem in problems[:MAX_PROBLEM_LINES]:
            print_stderr(f"warning: {out_dir / RESULTS_FILE} {problem}; ignored")
        if len(problems) > MAX_PROBLEM_LINES:
            print_stderr(f"warning: {len(problems) - MAX_PROBLEM_LINES} more invalid line(s) in "
                         f"{out_dir / RESULTS_FILE}; ignored")
    done_keys = {key_of_record(r) for r in existing}
    to_run = sum(1 for points in series(scenario) for p in points if p.key() not in done_keys)
    executor.open(points=to_run)  # resolves the device on a cluster (auto: its GPUs, if it has any)
    if resume:
        check_resumable(out_dir, scenario, settings.device, existing)
    try:
        write_manifest(out_dir, scenario, settings, cluster=executor.describe())
    except OSError as exc:
        raise folder_error(out_dir, exc) from None
    settings.device_name = executor.default_device_name()  # of the records this process writes
    return {key_of_record(r): r for r in existing}


def _stop_reason(record: dict) -> Optional[str]:
    status, n = record.get("status"), record.get("seq_len")
    if status == "oom":
        return f"out of memory at n={n}"
    if status == "timeout":
        return f"timed out at n={n}"
    if status == "skipped" and "exceeds the memory limit" in (record.get("reason") or ""):
        return f"predicted over the memory limit at n={n}"
    return None


def describe_limit(limit: Optional[int]) -> str:
    return fmt_bytes(limit) if limit else "none"


def print_stderr(text: str) -> None:
    print(printable(text), file=sys.stderr, flush=True)  # one line: a newline in a folder's name spelled out
