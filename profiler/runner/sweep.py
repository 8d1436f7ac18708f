"""`attnprof sweep`: every point of a scenario in its own process, nothing ever lost.

Each point is forked from a forkserver that has torch imported, so an OOM, a crash
(SIGKILL, segfault) or a hang past ``--point-timeout`` becomes that point's status and
the sweep moves on. Each record is appended and flushed as soon as it exists, so
Ctrl-C keeps every finished point and ``--resume`` completes the rest.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler.measure.accounting import predict
from attnprof.profiler.runner.manifest import check_resumable, write_manifest
from attnprof.profiler.runner.plan import series, shape_problem
from attnprof.profiler.records import Point, key_of_record
from attnprof.profiler.runner.progress import Progress
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import append_record, read_records
from attnprof.profiler.units import fmt_bytes
from attnprof.scenarios.scenario import Scenario
from attnprof.errors import UserError

SLOPE_RANGE = (1.0, 2.5)  # time exponents we allow when extrapolating a series


class SweepError(UserError):
    """A sweep that cannot start; one line."""


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

    def for_child(self) -> dict:
        return dict(self.__dict__)


class PointRunner:
    """Runs one point in a process forked from a warm forkserver."""

    def __init__(self):
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["attnprof.profiler.runner.preload"])
        self.current: Optional[mp.Process] = None

    def run(self, point: Point, settings: SweepSettings) -> dict:
        from attnprof.profiler.runner.worker import child_main

        receive, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=child_main, args=(send, point, settings.for_child()), daemon=True)
        self.current = proc
        proc.start()
        send.close()
        data = None
        try:
            if receive.poll(settings.point_timeout_s):
                try:
                    data = receive.recv()
                except (EOFError, OSError):
                    data = None
            else:
                self.kill()
                return {"status": "timeout", "reason": f"no result within --point-timeout {settings.point_timeout_s:g} s; worker killed"}
        finally:
            receive.close()
        proc.join(timeout=10)
        self.kill()  # a child that sent its result but lingers must not hold memory into the next point
        if data is not None:
            return data
        code = proc.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            why = f"worker killed by {name}"
            if name == "SIGKILL":
                why += " (the kernel's OOM killer, or an outside kill)"
            return {"status": "crashed", "reason": why}
        return {"status": "crashed", "reason": f"worker exited with code {code} and sent no result"}

    def kill(self) -> None:
        proc, self.current = self.current, None
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(timeout=10)


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
    out_dir = Path(out_dir)
    plan = series(scenario)
    existing = read_records(out_dir) if out_dir.exists() else []
    if existing and not resume:
        raise SweepError(f"{out_dir} already holds results; pass --resume to complete it, or choose another --out")
    if resume and existing:
        check_resumable(out_dir, scenario, settings.device)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_manifest(out_dir, scenario, settings)
    except OSError as exc:
        raise SweepError(f"cannot write the run folder {out_dir}: {exc.strerror or exc}") from None
    done = {key_of_record(r): r for r in existing}
    total = sum(len(s) for s in plan)
    summary = SweepSummary(out_dir, kept=sum(1 for s in plan for p in s if p.key() in done))
    progress = Progress(total, enabled=show_progress, already=summary.kept)
    runner = PointRunner()
    started = time.perf_counter()
    try:
        for points in plan:
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
    except KeyboardInterrupt:
        runner.kill()
        summary.interrupted = True
    finally:
        summary.wall_s = time.perf_counter() - started
        progress.close()
    return summary


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
