"""A fake run's for-loop optimizer keeps its step counters as real CPU tensors
(profiler/measure/real_counters.py): the traced run is event for event the one with
FakeTensorMode's constant-tracking counters, and the prediction equals the real CPU
tracker to the byte."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from attnprof.profiler.measure import optimizer, real_counters
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.drive import fake_mode, trace_point
from attnprof.profiler.measure.fakemode import light_dynamo
from attnprof.profiler.measure.step_trace import StepOnly, trace_step
from attnprof.profiler.measure.tracker import FREE, OP, MemoryTracker
from attnprof.profiler.records import Point, Shape


def point(variant: str = "sdpa", mode: str = "plain", opt: str = "adamw", impl: str = "forloop",
          precision: str = "fp32", layers: int = 3) -> Point:
    return Point(variant, mode, "model", Shape(batch=1, seq_len=32, d_model=32, heads=2, layers=layers,
                                               optimizer=opt, optimizer_impl=impl,
                                               autocast="bfloat16" if precision == "amp-bf16" else ""))


def canonical(trace: list) -> list:
    """The trace with each run of consecutive frees sorted: autocast's weight cache is a hash
    map keyed by address, so the frees at its clear (the forward's epilogue) come in an order
    that differs from run to run; a run of frees lowers the level the same in any order."""
    out, frees = [], []
    for event in trace:
        if event[0] == FREE:
            frees.append(event)
            continue
        out += sorted(frees)
        frees = []
        out.append(event)
    return out + sorted(frees)


def traced(p: Point, enabled: bool, monkeypatch):
    monkeypatch.setattr(real_counters, "ENABLED", enabled)
    optimizer.RECIPES.clear()  # the first step runs again: both sides pay and make the same
    t = trace_point(p, marks=True)
    return (canonical(t.trace), t.flops, t.io, t.reads, t.peak_bytes, t.breakdown_bytes, t.largest_at_peak, t.categories,
            t.origins, t.periods, t.step_params, t.peak_op, t.peak_pass)


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
def test_a_traced_run_is_the_same_with_real_counters(mode, precision, monkeypatch):
    p = point(mode=mode, precision=precision)
    assert traced(p, True, monkeypatch) == traced(p, False, monkeypatch)


def test_the_counters_are_real_and_count_after_the_step(monkeypatch):
    """Real 0-dim float32 CPU tensors, 4 bytes each, registered as optimizer state; the
    measured step adds one to each, as torch's own would (the prime's first step made 1)."""
    monkeypatch.setattr(real_counters, "ENABLED", True)
    layouts = [((8, 4), (4, 1), torch.float32, ((8, 4), (4, 1))), ((8,), (1,), torch.float32, ((8,), (1,)))]
    tracer, start = trace_step(point(), layouts)
    assert any(e[0] == OP and e[1] == "add_.Tensor" for e in tracer.trace[start:])  # step_t += 1
    with light_dynamo(), fake_mode(None):  # (a fake run's step runs under its tracker: drive.py)
        work = StepOnly(point(), layouts, "cpu")
        steps = [work.optimizer.state[p]["step"] for p in work.params]
        with MemoryTracker() as tracker:
            tracker.track([s for p in work.params for s in work.states_of(p)], "optimizer_state")
            assert [s.item() for s in steps] == [1.0, 1.0]
            work.update()
    assert all(type(s) is torch.Tensor and not isinstance(s, FakeTensor) for s in steps)
    assert all(s.dtype == torch.float32 and s.dim() == 0 and s.untyped_storage().nbytes() == 4 for s in steps)
    assert [s.item() for s in steps] == [2.0, 2.0]
    assert tracker.breakdown_at_peak().get("optimizer_state") == 2 * 4 + 2 * (32 + 8) * 4  # two counters; exp_avg, exp_avg_sq


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_a_foreach_or_fused_step_keeps_fake_counters(impl, monkeypatch):
    monkeypatch.setattr(real_counters, "ENABLED", True)
    layouts = [((8, 4), (4, 1), torch.float32, ((8, 4), (4, 1)))]
    with light_dynamo(), fake_mode(None):
        work = StepOnly(point(impl=impl), layouts, "cpu")
        assert all(isinstance(work.optimizer.state[p]["step"], FakeTensor) for p in work.params)


@pytest.mark.parametrize("mode", ["plain", "reversible"])
def test_the_prediction_equals_the_real_tracker(mode):
    p = point(mode=mode, layers=2)
    fake, real = account(p, fake=True), account(p, fake=False)
    assert (fake.peak_bytes, fake.breakdown_bytes) == (real.peak_bytes, real.breakdown_bytes)


def test_a_plain_tensor_that_is_not_a_counter_goes_to_the_fake_mode():
    """``torch.tensor`` inside the fake mode (a lift of a real tensor) still makes a fake one."""
    with light_dynamo(), fake_mode(None):
        with MemoryTracker():
            made = torch.tensor(3.0)
        assert isinstance(made, FakeTensor)


@pytest.mark.parametrize("flag", ["foreach", "fused", "capturable", "differentiable"])
def test_counters_stay_fake_where_the_step_would_mix_them_with_fake_tensors(flag):
    """``beta1 ** step`` (capturable, differentiable), ``_foreach_add_`` and the fused kernel
    take a counter together with fake tensors: those optimizers keep FakeTensorMode's own."""
    params = [torch.zeros(3, requires_grad=True)]
    assert optimizer.counters_may_be_real(torch.optim.AdamW(params))
    assert not optimizer.counters_may_be_real(torch.optim.AdamW(params, **{flag: True}))
