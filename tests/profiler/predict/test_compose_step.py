"""The optimizer step of a composed stack (issue 24): equal to the full-depth fake run to
the byte at depths 1-8 for SGD and AdamW and each implementation, in plain, checkpoint and
reversible stacks; a broken step summary is caught; a step that frees older storages before
its top is refused."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict import compose_step, fake_run
from attnprof.profiler.predict.compose_step import StepNotComposable, full_depth, summarise
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.measure.tracker import ALLOC, FREE, MARK, OP
from attnprof.profiler.records import Point, Shape


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def point(layers: int, optimizer: str = "adamw", impl: str = "foreach", mode: str = "plain", n: int = 16) -> Point:
    return Point("sdpa", mode, "model", Shape(batch=1, seq_len=n, d_model=32, heads=2, layers=layers,
                                              optimizer=optimizer, optimizer_impl=impl))


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.slow
@pytest.mark.parametrize("layers", range(1, 9))
def test_every_depth_with_adamw_foreach(layers):
    fast = predict(point(layers))
    assert figures(fast) == figures(account(point(layers), fake=True, count_flops=True))
    assert fast.op_costs == predict(point(layers), exact=False).op_costs
    if layers > 3:
        assert fast.method == "composed from L=3"


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,impl", [("adamw", "forloop"), ("adamw", "fused"), ("sgd", "foreach"),
                                            ("sgd", "forloop")])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_each_optimizer_and_mode_composes(optimizer, impl, mode):
    for n in (8, 64):  # the peak at the step; in backward
        p = point(5, optimizer, impl, mode, n)
        fast = predict(p)
        assert fast.method == "composed from L=3"
        assert figures(fast) == figures(account(p, fake=True, count_flops=True))


@pytest.mark.slow
def test_the_composed_op_costs_count_the_step():
    from attnprof.profiler.measure.drive import trace_point

    p = point(4)
    assert predict(p).op_costs == trace_point(p).op_costs()


@pytest.mark.slow
def test_a_step_summary_that_loses_a_byte_is_caught(monkeypatch):
    original = compose_step.summarise

    def lose_a_byte(*args):
        s = original(*args)
        return compose_step.StepSummary(None if s.top is None else s.top - 1, s.top_by, s.live_at_top, s.flops, s.costs)

    monkeypatch.setattr("attnprof.profiler.predict.compose.summarise", lose_a_byte)
    p = point(4, n=8)
    fast = predict(p)
    assert fast.method.startswith("exact; not composed")  # the identity check at the traced depth refuses it
    assert figures(fast) == figures(account(p, fake=True, count_flops=True))


def test_a_step_that_frees_an_older_storage_before_its_top_is_refused():
    trace = [(ALLOC, 1, 100, ""), (MARK, "step"), (OP, "x", None), (FREE, 1), (ALLOC, 2, 10, "x")]
    with pytest.raises(StepNotComposable):
        summarise(trace, 2, {}, {}, {2: "optimizer_temporaries"}, {})
    ok = summarise([(ALLOC, 1, 100, ""), (MARK, "step"), (OP, "x", None), (ALLOC, 2, 10, "x"), (FREE, 2), (FREE, 1)],
                   2, {}, {}, {2: "optimizer_temporaries"}, {2: ("x", (), "float32")})
    assert ok.top == 10 and ok.top_by == {"optimizer_temporaries": 10}
    assert ok.live_at_top == ((10, "optimizer_temporaries", ("x", (), "float32")),)


def test_full_depth_repeats_the_middle_period():
    assert full_depth([["a"], ["b"], ["c", "n"]], 5) == ["a", "b", "b", "b", "c", "n"]


# --- a for-loop step, marked period by period (measure/drive.py: Marks._mark_step) ---------
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("mode", ["plain", "reversible"])
def test_a_forloop_step_composes_as_a_pass_of_its_own(optimizer, mode):
    from attnprof.profiler.measure.drive import trace_point
    from attnprof.profiler.predict.compose import Composition

    comp = Composition.of(trace_point(point(3, optimizer, "forloop", mode), marks=True))
    assert comp.passes[-1] == "step" and comp.step is None  # periods, not a step run alone
    assert "step" in comp.epilogues  # zero_grad: every period's gradients at once
    for layers in (4, 7):
        for n in (8, 64):  # the peak at the step; in backward
            p = point(layers, optimizer, "forloop", mode, n)
            fast = predict(p)
            assert fast.method == "composed from L=3"
            slow = account(p, fake=True, count_flops=True)
            assert figures(fast) + (fast.peak_op, fast.peak_pass) == figures(slow) + (slow.peak_op, slow.peak_pass)


def test_a_forloop_step_composes_to_the_full_runs_events_and_op_costs():
    from attnprof.profiler.measure.drive import trace_point
    from attnprof.profiler.predict.compose import Composition

    full = trace_point(point(6, "adamw", "forloop"))
    comp = Composition.of(trace_point(point(3, "adamw", "forloop"), marks=True))
    events, flops = comp.events(6)
    assert events == full.trace
    assert comp.op_costs(6) == full.op_costs()
    assert (comp.peak_op(6) == (full.peak_op, full.peak_pass))


def test_a_forloop_step_behind_a_grad_scaler_is_run_alone():
    """amp-fp16: GradScaler's unscale reads every gradient in one op, so the step is not
    marked by periods; the step run alone at full depth (compose_step.at_depth) merges it."""
    from attnprof.profiler.measure.drive import trace_point
    from attnprof.profiler.predict.compose import Composition

    p = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=16, d_model=32, heads=2, layers=3, optimizer="adamw",
                                              optimizer_impl="forloop", autocast="float16"))
    comp = Composition.of(trace_point(p, marks=True))
    assert "step" not in comp.passes and comp.step is not None
    deep = replace_layers(p, 5)
    assert figures(predict(deep)) == figures(account(deep, fake=True, count_flops=True))


def replace_layers(p: Point, layers: int) -> Point:
    from dataclasses import replace

    return replace(p, shape=replace(p.shape, layers=layers))
