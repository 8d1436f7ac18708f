"""The optimizer step run alone (issue 24): on fake parameters of the traced run's layouts
it makes exactly the allocations and frees of the traced run's own step pass."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.drive import MARK_LABEL, PROLOGUE, trace_point
from attnprof.profiler.measure.step_trace import trace_step
from attnprof.profiler.measure.tracker import ALLOC, FREE, MARK, OP
from attnprof.profiler.records import Point, Shape


def step_events(trace: list, start: int) -> list:
    """ALLOC sizes, FREE counts and op names of a step pass, serials left out."""
    return [(e[0], e[2]) if e[0] == ALLOC else (e[0],) if e[0] == FREE else e[:2] for e in trace[start:]
            if e[0] in (ALLOC, FREE, OP)]


@pytest.mark.slow
def test_the_step_alone_is_the_traced_runs_step():
    for impl in ("foreach", "forloop", "fused"):
        point = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=16, d_model=32, heads=2, layers=3,
                                                      optimizer="adamw", optimizer_impl=impl))
        traced = trace_point(point, marks=True)
        at = traced.trace.index((MARK, (MARK_LABEL, "step", PROLOGUE)))
        layouts = [entry for group in traced.step_params for entry in group]
        tracer, start = trace_step(point, layouts)
        alone, traced_step = step_events(tracer.trace, start), step_events(traced.trace, at + 1)
        assert traced_step[:len(alone)] == alone
        assert traced_step[len(alone):] == [(FREE,)]  # drive's loss, after the step (as a training loop's)
        assert any(e[0] == OP for e in tracer.trace[start:])


def test_the_layouts_are_per_period_with_the_final_norm_last():
    point = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=16, d_model=32, heads=2, layers=3, optimizer="sgd"))
    traced = trace_point(point, marks=True)
    assert len(traced.step_params) == 3
    first, middle, last = traced.step_params
    assert len(last) == len(first) + 2 and first == middle  # the final LayerNorm's weight and bias
    assert all(grad is not None for group in traced.step_params for *_, grad in group)
