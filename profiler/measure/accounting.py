"""Exact tensor accounting of one point: measured on real CPU tensors, or predicted
under FakeTensorMode without allocating anything (a small float32 point is predicted by
running it for real: the same figures, faster; see profiler/predict/fake_run.py). The same Workload
runs every way. The fast prediction of a point (cached, composed, or a small point run
for real) is profiler/predict/fake_run.py's ``predict``."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch

from attnprof.profiler.measure.drive import drive
from attnprof.profiler.measure.flops import FlopCounter
from attnprof.profiler.records import Point
from attnprof.profiler.safe_points import deferring
from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.profiler.measure.workload import Workload
from attnprof.scenarios.variants.registry import with_spec


@dataclass
class Accounting:
    peak_bytes: int  # peak of live tensor storages over forward (+ backward)
    breakdown_bytes: dict = field(default_factory=dict)  # at the peak, by category
    largest_at_peak: list = field(default_factory=list)  # the biggest storages then, with their op
    flops_fwd: int = 0  # counted by FlopCounterMode (prediction only)
    flops_bwd: int = 0
    wall_ms: float = 0.0  # how long the accounting itself took
    method: str = "exact"  # every layer ran; or "composed from L=a" (see predict)
    op_costs: list = field(default_factory=list)  # [pass, op, flops, bytes read, bytes written, count] (prediction)
    cached: bool = False  # read back from the persistent prediction cache
    peak_op: str = ""  # issue 24: the op whose output reached the peak ("" unknown: e.g. registered tensors)
    peak_pass: str = ""  # issue 24: its pass, "forward" | "backward" | "step" ("" unknown)


@deferring  # Ctrl-C and SIGTERM wait for a safe point (profiler/safe_points.py)
def account(point: Point, *, fake: bool, device: str = "cpu", count_flops: bool = False, seed: int = 0) -> Accounting:
    """Run the point's forward (+ backward) under the tracker; ``fake`` allocates nothing.

    The tracker is entered *inside* the fake mode; entered outside, it would see only
    parameters and inputs (../shared/NOTES.md). With ``fake`` this is the plain full-depth
    fake-tensor run that every fast prediction (``predict.fake_run.predict``) must equal to the byte.
    """
    from attnprof.profiler.measure.internals import new_fake_mode  # imported when needed: sympy, ~0.3 s

    point = with_spec(point)  # a point built by hand: its label parsed once, here
    start = time.perf_counter()
    torch.manual_seed(seed)
    outer = new_fake_mode(quick=False) if fake else contextlib.nullcontext()
    with outer:
        work = Workload(point, device)
        flops = FlopCounter() if count_flops else contextlib.nullcontext()
        with flops as counter, MemoryTracker() as tracker:
            so_far = []  # FLOPs counted when backward starts

            def phase(name: str) -> None:
                if name == "backward" and count_flops:
                    so_far.append(counter.total)

            drive(work, tracker, phase=phase)
            total = counter.total if count_flops else 0
            flops_fwd = so_far[0] if so_far else total
            flops_bwd = total - flops_fwd
        report = tracker.report()
    return Accounting(report.peak_bytes, report.breakdown_bytes, report.largest_at_peak, flops_fwd, flops_bwd,
                      (time.perf_counter() - start) * 1e3, peak_op=report.peak_op, peak_pass=report.peak_pass)


def measure_cpu(point: Point) -> Accounting:
    """The exact tensor peak of a real CPU run of the point."""
    return account(point, fake=False, device="cpu")
