"""The optimizer step's period marks (issue 24, measure/step_marks.py): a for-loop step is
marked period after period, in order, then its epilogue (zero_grad); a foreach or fused step
and one behind a GradScaler are not marked; the marks allocate nothing."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.drive import EPILOGUE, MARK_LABEL, PROLOGUE, trace_point
from attnprof.profiler.measure.tracker import MARK
from attnprof.profiler.records import Point, Shape


def point(impl: str, optimizer: str = "adamw", layers: int = 3, autocast: str = "") -> Point:
    return Point("sdpa", "plain", "model", Shape(batch=1, seq_len=16, d_model=32, heads=2, layers=layers,
                                                 optimizer=optimizer, optimizer_impl=impl, autocast=autocast))


def step_marks(traced) -> list:
    return [e[1][2] for e in traced.trace if e[0] == MARK and isinstance(e[1], tuple)
            and e[1][:2] == (MARK_LABEL, "step")]


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_forloop_step_is_marked_period_by_period_then_its_epilogue(optimizer):
    assert step_marks(trace_point(point("forloop", optimizer, layers=4), marks=True)) == [PROLOGUE, 0, 1, 2, 3, EPILOGUE]


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_a_foreach_or_fused_step_is_not(impl):
    assert step_marks(trace_point(point(impl), marks=True)) == [PROLOGUE]


def test_a_step_behind_a_grad_scaler_is_not():
    assert step_marks(trace_point(point("forloop", autocast="float16"), marks=True)) == [PROLOGUE]


def test_the_marks_change_no_figure():
    marked, plain = trace_point(point("forloop"), marks=True), trace_point(point("forloop"))
    assert (marked.peak_bytes, marked.breakdown_bytes, marked.largest_at_peak, marked.flops_fwd, marked.flops_bwd) == \
        (plain.peak_bytes, plain.breakdown_bytes, plain.largest_at_peak, plain.flops_fwd, plain.flops_bwd)
