"""Driving a point under a tracer (profiler/measure/drive.py): the order of what ``drive``
does, the Tracer's counts through the tracker's public API, and ``trace_point``'s run."""

from __future__ import annotations

import torch

from attnprof.profiler.measure.drive import MARK_LABEL, PROLOGUE, Tracer, count_into, drive, op_costs_rows, trace_point
from attnprof.profiler.measure.tracker import ALLOC, MARK, MemoryTracker
from attnprof.profiler.records import Point, Shape

SHAPE = Shape(batch=1, seq_len=32, d_model=16, heads=2, layers=2)


class _Work:
    """A workload stand-in that records what drive asks of it."""

    def __init__(self, forward_only: bool):
        self.point = Point("full", "plain", "model", SHAPE, forward_only)
        self.params = [torch.ones(4, requires_grad=True)]
        self.inputs = [torch.ones(3)]
        self.dout = None
        self.calls: list = []

    def forward(self):
        self.calls.append("forward")
        return (self.params[0] * 2).sum()

    def backward(self, result):
        self.calls.append("backward")
        result.backward()

    def grads(self):
        return [p.grad for p in self.params]


def test_drive_registers_runs_both_passes_and_names_the_gradients():
    work = _Work(forward_only=False)
    phases = []
    with MemoryTracker() as tracker:
        drive(work, tracker, phase=phases.append)
    assert phases == ["forward", "backward"] and work.calls == ["forward", "backward"]
    assert tracker.report().breakdown_bytes["gradients"] == 16  # the parameter's .grad


def test_drive_forward_only_and_its_own_parameter_registration():
    work = _Work(forward_only=True)
    phases, registered = [], []
    with MemoryTracker() as tracker:
        drive(work, tracker, track_parameters=lambda: registered.append(True) or tracker.track(work.params, "parameters"),
              phase=phases.append)
    assert phases == ["forward"] and work.calls == ["forward"] and registered == [True]


def test_the_tracer_reads_the_tracker_through_its_public_api():
    with Tracer() as tracer:
        a = torch.ones(8)
        b = a * 2
        c = torch.mm(b.view(2, 4), b.view(4, 2))
    serials = tracer.live_serials([a, b, c])
    assert len(serials) == 3 and sorted(serials) == list(serials)
    assert set(tracer.categories().values()) <= {"temporaries", "activations"}
    assert {op for op, _, _ in tracer.origins().values()} >= {"mul.Tensor", "mm.default"}
    assert sum(tracer.flops.values()) == 2 * 2 * 4 * 2  # the mm's multiply-adds, counted in the same mode
    assert any(event[0] == ALLOC for event in tracer.trace)


def test_trace_point_marks_periods_and_counts_op_costs():
    point = Point("full", "plain", "model", SHAPE)
    traced = trace_point(point, marks=True)
    assert traced.periods == 2  # two layers, period 1
    marks = [e[1] for e in traced.trace if e[0] == MARK and isinstance(e[1], tuple) and e[1][0] == MARK_LABEL]
    assert ("param", PROLOGUE) in [m[1:] for m in marks] and ("bwd", 0) in [m[1:] for m in marks]
    assert traced.peak_bytes > 0 and traced.flops_fwd > 0 and traced.flops_bwd > 0
    rows = traced.op_costs()
    assert rows and all(r[0] in ("fwd", "bwd") and r[-1] >= 1 for r in rows)
    plain = trace_point(point)
    assert (plain.peak_bytes, plain.breakdown_bytes) == (traced.peak_bytes, traced.breakdown_bytes)


def test_trace_point_keeps_what_held_says_of_the_workload_it_ran():
    """``held`` (the GPU model's: memmodel/trace.py held_parameters) sees the Workload the trace
    ran, its parameters those the run registered; its events are kept apart from the trace."""
    point = Point("full", "none", "attention", SHAPE)
    seen = []

    def held(work):
        seen.append((work.point, len(work.params), sum(1 for _ in work.module.parameters())))
        return [(ALLOC, "device.held", 8, "")]

    traced = trace_point(point, held=held)
    assert traced.held == [(ALLOC, "device.held", 8, "")] and ("device.held" not in {e[1] for e in traced.trace})
    assert len(seen) == 1 and seen[0][0] == point and seen[0][1:] == (0, 2)  # full's core has none; to_in, to_out
    assert trace_point(point).held == []


def test_op_cost_rows_leave_out_ops_that_cost_nothing():
    costs: dict = {}
    count_into(costs, ("fwd", "view.default", 0, 0, 0))
    count_into(costs, ("fwd", "mm.default", 10, 4, 4))
    count_into(costs, ("fwd", "mm.default", 10, 4, 4))
    assert op_costs_rows(costs) == [["fwd", "mm.default", 10, 4, 4, 2]]
