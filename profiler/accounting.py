"""Exact tensor accounting of one point: measured on real CPU tensors, or predicted
under FakeTensorMode without allocating anything. The same Workload runs both ways."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.flops import FlopCounter
from attnprof.profiler.point import Point
from attnprof.profiler.tracker import MemoryTracker
from attnprof.profiler.workload import Workload


@dataclass
class Accounting:
    peak_bytes: int  # peak of live tensor storages over forward (+ backward)
    breakdown_bytes: dict = field(default_factory=dict)  # at the peak, by category
    largest_at_peak: list = field(default_factory=list)  # the biggest storages then, with their op
    flops_fwd: int = 0  # counted by FlopCounterMode (prediction only)
    flops_bwd: int = 0
    wall_ms: float = 0.0  # how long the accounting itself took


def account(point: Point, *, fake: bool, device: str = "cpu", count_flops: bool = False, seed: int = 0) -> Accounting:
    """Run the point's forward (+ backward) under the tracker; ``fake`` allocates nothing.

    The tracker is entered *inside* the fake mode; entered outside, it would see only
    parameters and inputs (../shared/NOTES.md).
    """
    start = time.perf_counter()
    torch.manual_seed(seed)
    outer = FakeTensorMode() if fake else contextlib.nullcontext()
    with outer:
        work = Workload(point, device)
        flops = FlopCounter() if count_flops else contextlib.nullcontext()
        with flops as counter, MemoryTracker() as tracker:
            tracker.track(work.params, "parameters")
            tracker.track(work.inputs, "inputs")
            loss = work.forward()
            flops_fwd = counter.total if count_flops else 0
            if not point.forward_only:
                work.backward(loss)
                tracker.mark_gradients(work.grads())
            del loss
            flops_bwd = counter.total - flops_fwd if count_flops else 0
        report = tracker.report()
    return Accounting(report.peak_bytes, report.breakdown_bytes, report.largest_at_peak, flops_fwd, flops_bwd,
                      (time.perf_counter() - start) * 1e3)


def predict(point: Point, *, count_flops: bool = True) -> Accounting:
    """Predicted peak bytes and FLOPs of a point, from fake tensors on the CPU device.

    Not the meta device: SDPA falls back to its quadratic math path there (NOTES.md).
    """
    return account(point, fake=True, device="cpu", count_flops=count_flops)


def measure_cpu(point: Point) -> Accounting:
    """The exact tensor peak of a real CPU run of the point."""
    return account(point, fake=False, device="cpu")
