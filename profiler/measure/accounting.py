"""Exact tensor accounting of one point: measured on real CPU tensors, or predicted
under FakeTensorMode without allocating anything. The same Workload runs both ways."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure.flops import FlopCounter
from attnprof.profiler.records import Point
from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.profiler.measure.workload import Workload


@dataclass
class Accounting:
    peak_bytes: int  # peak of live tensor storages over forward (+ backward)
    breakdown_bytes: dict = field(default_factory=dict)  # at the peak, by category
    largest_at_peak: list = field(default_factory=list)  # the biggest storages then, with their op
    flops_fwd: int = 0  # counted by FlopCounterMode (prediction only)
    flops_bwd: int = 0
    wall_ms: float = 0.0  # how long the accounting itself took
    method: str = "exact"  # or "extrapolated from L=a,b,c" (see predict)


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


def predict(point: Point, *, count_flops: bool = True, exact: bool = False) -> Accounting:
    """Predicted peak bytes and FLOPs of a point, from fake tensors on the CPU device.

    Not the meta device: SDPA falls back to its quadratic math path there (NOTES.md).

    Deep stacks: a fake run costs time per op, not per byte, so a 12-layer model costs
    L layers of dispatch. Its blocks are identical (up to the variant's layer period
    p), so the peak, every breakdown category and the FLOPs are affine in depth once
    the peak sits in the same phase of the computation (measured: from L=2 on; a
    single layer is special, its backward has no earlier layers' gradients beside it).
    For deep stacks (L > 9p) the predictor runs 2p, 3p and 4p layers; if both steps
    are equal to the byte it extrapolates to L, otherwise it runs all L layers.
    ``exact=True`` always runs all L layers; tests check that both agree for every
    variant x mode.
    """
    start = time.perf_counter()
    layers = point.shape.layers
    period = _layer_period(point)
    depths = [2 * period, 3 * period, 4 * period]
    if exact or point.scope != "model" or layers % period or sum(depths) >= layers:
        return account(point, fake=True, device="cpu", count_flops=count_flops)
    runs = [account(_with_layers(point, d), fake=True, device="cpu", count_flops=count_flops) for d in depths]
    fit = _affine(runs, (layers - depths[-1]) // period)
    if fit is None:
        return account(point, fake=True, device="cpu", count_flops=count_flops)
    fit.wall_ms = (time.perf_counter() - start) * 1e3
    fit.method = "extrapolated from L=" + ",".join(map(str, depths))
    return fit


def _layer_period(point: Point) -> int:
    from attnprof.scenarios.variants.registry import parse_variant

    spec = parse_variant(point.variant)
    return spec.cls.layer_period(spec.cls.resolve_options(spec.options))


def _with_layers(point: Point, layers: int) -> Point:
    return replace(point, shape=replace(point.shape, layers=layers))


def _affine(runs: list[Accounting], steps: int) -> Accounting | None:
    """The run ``steps`` periods past the last one, if every figure grows by equal steps."""
    def series(get):
        values = [get(r) for r in runs]
        delta = values[1] - values[0]
        return values[-1] + steps * delta if values[2] - values[1] == delta else None

    getters = {"peak": lambda r: r.peak_bytes, "fwd": lambda r: r.flops_fwd, "bwd": lambda r: r.flops_bwd}
    for cat in runs[0].breakdown_bytes:
        getters[cat] = lambda r, c=cat: r.breakdown_bytes[c]
    fitted = {name: series(get) for name, get in getters.items()}
    if any(v is None for v in fitted.values()):
        return None
    breakdown = {cat: fitted[cat] for cat in runs[0].breakdown_bytes}
    return Accounting(fitted["peak"], breakdown, runs[-1].largest_at_peak, fitted["fwd"], fitted["bwd"])


def measure_cpu(point: Point) -> Accounting:
    """The exact tensor peak of a real CPU run of the point."""
    return account(point, fake=False, device="cpu")
