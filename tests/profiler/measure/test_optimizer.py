"""The optimizer step (issue 24): model states against the closed form (AdamW 16 bytes per
parameter at the step, SGD with momentum 12), torch's default implementation as torch
picks it, the prediction equal to the real CPU tracker to the byte for every optimizer and
implementation in plain, checkpoint and reversible stacks, and nonsense refused in one line."""

from __future__ import annotations

import pytest
import torch

from attnprof.errors import UserError
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.optimizer import SGD_MOMENTUM, default_impl, resolved_impl
from attnprof.profiler.measure.workload import Workload
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

IMPLS = ["foreach", "forloop", "fused"]  # all three exist on the CPU in this torch (checked below)


def weights_point(optimizer: str, impl: str = "", mode: str = "plain", layers: int = 2) -> Point:
    """A few tokens over wide weights: the model states dominate, the peak is at the step."""
    return Point("sdpa", mode, "model", Shape(batch=1, seq_len=8, d_model=64, heads=2, layers=layers,
                                              optimizer=optimizer, optimizer_impl=impl))


def counts(point: Point) -> tuple:
    """(parameter elements P, parameter tensors T, bytes of the input's gradient)."""
    work = Workload(point)
    s = point.shape
    return sum(p.numel() for p in work.params), len(work.params), s.batch * s.seq_len * s.d_model * 4


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


def test_the_default_is_what_torch_picks_on_the_cpu():
    from torch.optim.optimizer import _default_to_fused_or_foreach

    fused, foreach = _default_to_fused_or_foreach([torch.zeros(1)], differentiable=False, use_fused=False)
    assert default_impl("cpu") == ("fused" if fused else "foreach" if foreach else "forloop")
    assert resolved_impl(Shape(optimizer="adamw"), "cpu") == default_impl("cpu")
    assert resolved_impl(Shape(optimizer="adamw", optimizer_impl="fused"), "cpu") == "fused"


def test_on_cuda_torch_picks_foreach_when_it_has_the_kernels():
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    assert default_impl("cuda") == ("foreach" if "cuda" in _get_foreach_kernels_supported_devices() else "forloop")


@pytest.mark.slow
def test_each_implementation_runs_what_it_says():
    for impl in IMPLS:
        opt = Workload(weights_point("adamw", impl)).optimizer
        group = opt.param_groups[0]
        assert (bool(group["foreach"]), bool(group["fused"])) == (impl == "foreach", impl == "fused")
    sgd = Workload(weights_point("sgd")).optimizer
    assert sgd.param_groups[0]["momentum"] == SGD_MOMENTUM


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_forloop_optimizer_primed_by_foreach_holds_the_states_its_ownfirst_step_makes(optimizer):
    """measure/optimizer.prime takes a for-loop optimizer's first step with foreach (a few
    list ops instead of ~12 per parameter): the states must be the ones a for-loop first step
    makes, every one in the same shape, stride, dtype and device, in the same order."""
    from attnprof.profiler.measure.optimizer import prime, states

    def layouts(opt, params):
        return [[(tuple(t.shape), t.stride(), t.dtype, t.device) for t in states(opt, p)] for p in params]

    torch.manual_seed(0)
    params = [torch.randn(3, 5, requires_grad=True), torch.randn(5, requires_grad=True),
              torch.randn(4, 6).t().requires_grad_()]  # a transposed leaf: strides kept?
    make = {"adamw": lambda ps: torch.optim.AdamW(ps, foreach=False),
            "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=SGD_MOMENTUM, foreach=False)}[optimizer]
    primed = make(params)
    prime(primed, params)
    assert primed.param_groups[0]["foreach"] is False  # still a for-loop optimizer
    assert all(p.grad is None for p in params)  # prime dropped its gradients
    own = make(params)
    for p in params:
        p.grad = torch.zeros_like(p)
    own.step()  # the for-loop first step itself
    assert layouts(primed, params) == layouts(own, params)
    assert all(len(primed.state[p]) == len(own.state[p]) > 0 for p in params)


@pytest.mark.parametrize("optimizer,impl", [("adamw", "forloop"), ("adamw", "foreach"), ("adamw", "fused"),
                                            ("sgd", "forloop")])
def test_under_fake_tensors_a_known_layout_gets_the_states_afirst_step_makes(optimizer, impl):
    """optimizer.prime steps once per parameter layout in a process under fake tensors and
    makes the states of later parameters of that layout from what it made: the same keys in
    the same order, each state in the same shape, stride, dtype and device, and the value
    FakeTensorMode tracks (AdamW's step) the same, so ``.item()`` still answers."""
    from attnprof.profiler.measure import optimizer as opt
    from attnprof.profiler.measure.fakemode import light_dynamo
    from attnprof.profiler.measure.internals import new_fake_mode

    def made(prime_with_recipes: bool) -> list:
        flags = {"foreach": impl == "foreach", "fused": impl == "fused"}
        with light_dynamo(), new_fake_mode():
            params = [torch.empty(6, 5, requires_grad=True), torch.empty(5, requires_grad=True)]
            o = (torch.optim.AdamW(params, **flags) if optimizer == "adamw"
                 else torch.optim.SGD(params, lr=1e-3, momentum=SGD_MOMENTUM, **flags))
            if prime_with_recipes:
                opt.prime(o, params)  # the recipes of these layouts are known by now: no step
            else:
                opt.first_step(o, params)
            return [[(name, tuple(v.shape), v.stride(), v.dtype, str(v.device), value(v))
                     for name, v in o.state[p].items()] for p in params]

    def value(v):
        """The value FakeTensorMode tracks, or a real counter's (measure/real_counters.py: a
        for-loop step's), or None."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from attnprof.profiler.measure.real_counters import is_real_counter

        if is_real_counter(v):
            with unset_fake_temporarily():
                return ("real", v.item())
        return ("fake", v.item()) if getattr(v, "constant", None) is not None else None

    opt.RECIPES.clear()
    first = made(True)  # learns the recipes (a first step)
    assert opt.RECIPES
    assert made(True) == first  # from the recipes
    plain = made(False)  # a plain first step: fake counters, the same value
    assert [[(*e[:5], e[5] and e[5][1]) for e in p] for p in plain] == [[(*e[:5], e[5] and e[5][1]) for e in p]
                                                                        for p in first]
    counters = [e[5] and e[5][0] for p in first for e in p if e[0] == "step"]  # AdamW's only
    expected = {"forloop": "real", "foreach": "fake", "fused": None}[impl]  # fused: on the device, untracked
    assert counters == ([expected] * 2 if optimizer == "adamw" else [])


@pytest.mark.parametrize("impl", IMPLS)
def test_adamw_holds_16_bytes_per_parameter_at_the_step(impl):
    point = weights_point("adamw", impl)
    p, t, input_grad = counts(point)
    acc = account(point, fake=True)
    br = acc.breakdown_bytes
    assert br["parameters"] == 4 * p
    assert br["optimizer_state"] == 8 * p + 4 * t  # exp_avg, exp_avg_sq; and torch's 0-dim float32 step per tensor
    if impl == "fused":  # one kernel, in place: nothing allocated, so the peak stays where it was (backward)
        assert "optimizer_temporaries" not in br
        assert acc.peak_bytes == account(weights_point("none"), fake=True).peak_bytes + 8 * p + 4 * t
        return
    assert br["gradients"] == 4 * p + input_grad  # every parameter's, and the input's: the peak is in the step
    assert br["parameters"] + br["gradients"] - input_grad + br["optimizer_state"] - 4 * t == 16 * p
    if impl == "foreach":  # the step's peak: _foreach_sqrt materialises one list the size of the parameters
        assert br["optimizer_temporaries"] == 4 * p
    else:  # forloop: one parameter's temporaries at a time
        assert 0 < br["optimizer_temporaries"] < 4 * p


@pytest.mark.parametrize("impl", IMPLS)
def test_sgd_with_momentum_holds_12_bytes_per_parameter(impl):
    point = weights_point("sgd", impl)
    p, _, _ = counts(point)
    acc, none = account(point, fake=True), account(weights_point("none"), fake=True)
    assert acc.breakdown_bytes["optimizer_state"] == 4 * p  # one momentum buffer per parameter
    assert acc.peak_bytes == none.peak_bytes + 4 * p  # live from the start, and the step allocates nothing
    br = acc.breakdown_bytes
    assert br["parameters"] + br["optimizer_state"] == 8 * p  # + the gradients (4P) once backward has made them


def test_without_an_optimizer_nothing_changes():
    acc = account(weights_point("none"), fake=True)
    assert set(acc.breakdown_bytes) == {"parameters", "gradients", "inputs", "activations", "temporaries"}


def test_the_gradients_are_gone_after_the_step():
    work = Workload(weights_point("adamw", "foreach"))
    work.step()
    assert all(p.grad is None for p in work.params)
    assert all(len(work.states_of(p)) == 3 for p in work.params)  # step, exp_avg, exp_avg_sq


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,impl", [("sgd", "foreach"), ("sgd", "forloop"), ("sgd", "fused"),
                                            ("adamw", "foreach"), ("adamw", "forloop"), ("adamw", "fused"),
                                            ("adamw", "")])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_the_prediction_equals_the_real_cpu_tracker(optimizer, impl, mode, monkeypatch):
    for point in (weights_point(optimizer, impl, mode),  # the peak at the step
                  Point("full", mode, "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=2,
                                                     optimizer=optimizer, optimizer_impl=impl))):  # in backward
        real = account(point, fake=False)
        fake = account(point, fake=True, count_flops=True)
        assert (real.peak_bytes, real.breakdown_bytes, real.largest_at_peak) == figures(fake)[:3]
        assert figures(predict(point)) == figures(fake)  # a small point: run for real
        monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)
        assert figures(predict(point)) == figures(fake)  # fake tensors, traced
        monkeypatch.undo()


@pytest.mark.slow
def test_lsh_with_adamw_equals_the_real_run():
    point = Point("lsh[n_hashes=2,bucket_size=16]", "reversible", "model",
                  Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=2, optimizer="adamw", optimizer_impl="foreach"))
    real, fake = account(point, fake=False), account(point, fake=True)
    assert (real.peak_bytes, real.breakdown_bytes, real.largest_at_peak) == figures(fake)[:3]


def test_scope_attention_without_parameters_has_no_optimizer():
    point = Point("full", "none", "attention", Shape(seq_len=32, d_model=32, heads=2, optimizer="adamw"))
    work = Workload(point)
    assert work.params == [] and work.optimizer is None


def test_nonsense_is_refused_in_one_line():
    with pytest.raises(UserError, match="needs a backward") as exc:
        Workload(Point("sdpa", "plain", "model", Shape(seq_len=8, d_model=32, heads=2, optimizer="adamw"),
                       forward_only=True))
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match="needs an optimizer"):
        Workload(Point("sdpa", "plain", "model", Shape(seq_len=8, d_model=32, heads=2, optimizer_impl="fused")))
    with pytest.raises(UserError):
        Shape(optimizer="adam")


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_amp_fp16_steps_through_its_grad_scaler_exactly(mode, monkeypatch):
    """amp-fp16 with an optimizer: the gradients unscaled in place, the step, the scale updated
    (GradScaler.step's work, without its .item()), counted alike by real and fake tensors."""
    from attnprof.profiler.measure.accounting import account
    from attnprof.profiler.measure.workload import Workload
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.records import Point, Shape

    point = Point("sdpa", mode, "model", Shape(seq_len=64, d_model=32, heads=2, layers=2, autocast="float16",
                                               optimizer="adamw", optimizer_impl="foreach"))
    real, fake, predicted = account(point, fake=False), account(point, fake=True), predict(point)
    assert real.peak_bytes == fake.peak_bytes == predicted.peak_bytes
    assert real.breakdown_bytes == fake.breakdown_bytes == predicted.breakdown_bytes
    calls = []
    for name in ("unscale_", "update"):
        real_method = getattr(torch.amp.GradScaler, name)
        monkeypatch.setattr(torch.amp.GradScaler, name,
                            lambda self, *a, _m=real_method, _n=name, **k: calls.append(_n) or _m(self, *a, **k))
    work = Workload(point)
    work.step()
    assert calls == ["unscale_", "update"]  # the gradients unscaled before the step, the scale updated after
