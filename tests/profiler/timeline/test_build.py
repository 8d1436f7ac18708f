"""A point's timeline agrees with the prediction: the tensor peak, the GPU model's peaks,
and the step time, to the byte and to rounding."""

import pytest
from timeline_points import RATES, point, timeline_of, small  # noqa: F401 (fixtures)

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.memmodel.gpu_peak import gpu_memory
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.predict.gpu_points import predict_gpu
from attnprof.profiler.timemodel.fields import point_time
from attnprof.profiler.timemodel.rates import gpu_rates

CPU_POINTS = [point(), point(mode="checkpoint"), point(mode="reversible"), point(layers=4),  # 4 > 3 periods: composed
              point("sdpa", dtype="bfloat16", d_model=64), point("sdpa", "none", "attention"),
              point(forward_only=True),
              point("sdpa", d_model=64, optimizer="adamw", autocast="bfloat16")]  # issue 24: AMP's compute dtype


@pytest.mark.slow
@pytest.mark.parametrize("p", CPU_POINTS, ids=lambda p: f"{p.variant}-{p.mode}-{p.scope}-L{p.shape.layers}"
                                                        f"{'-fwd' if p.forward_only else ''}"
                                                        f"{'-amp-' + p.shape.optimizer if p.shape.autocast else ''}")
def test_the_tensor_peak_and_the_step_time_are_the_predictions(p):
    t = timeline_of(p)
    acc = predict(p)
    assert t.tensor_peak_bytes == acc.peak_bytes
    assert t.allocations.allocated_peak_bytes == acc.peak_bytes == t.allocations.reserved_peak_bytes
    assert t.steps.timed
    assert t.steps.step_us == pytest.approx(point_time(p, acc.op_costs, RATES).time_ms * 1e3, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("p", [point("sdpa", dtype="bfloat16", d_model=64), point(), point(mode="checkpoint"),
                               point("sdpa", dtype="float64", d_model=64),
                               # issue 24: the GPU's optimizer (foreach), its host-resident counters, autocast's SDPA
                               point("sdpa", d_model=64, optimizer="adamw"),
                               point("sdpa", d_model=64, optimizer="adamw", autocast="bfloat16"),
                               point("full", optimizer="sgd", mode="checkpoint"),
                               # issue 39: flash with dropout, where it would otherwise split K/V
                               point("sdpa[dropout=0.1]", dtype="bfloat16", d_model=64, n=1024, forward_only=True)],
                         ids=["sdpa-bf16", "full", "full-checkpoint", "sdpa-fp64-math", "sdpa-adamw",
                              "sdpa-amp-adamw", "full-sgd-checkpoint", "sdpa-dropout-forward"])
def test_on_a_gpu_the_allocator_peaks_and_the_step_time_are_the_models(p):
    gpu = get_gpu("h100-sxm")
    t = timeline_of(p, "h100-sxm")
    model = gpu_memory(p, gpu)
    assert t.allocations.allocated_peak_bytes == model.allocated_peak_bytes
    assert t.allocations.reserved_peak_bytes == model.reserved_peak_bytes
    assert t.allocations.tensor_peak_bytes == model.tensor_peak_bytes
    times = predict_gpu(p, gpu).times  # rounded to 0.1 us; the model's own sum below
    assert t.steps.step_us == pytest.approx((times["gpu_time_fwd_ms"] + (times["gpu_time_bwd_ms"] or 0)) * 1e3, abs=0.2)
    exact = point_time(p, predict(on_device(p, "cuda")).op_costs, gpu_rates(gpu, model.sdpa_backend or "flash"))
    assert t.steps.step_us == pytest.approx(exact.time_ms * 1e3, rel=1e-9)


def test_every_event_falls_in_an_op_in_order_of_time(small):
    times = [small.time_us[a.at] for a in small.allocations.actions]
    assert times == sorted(times)
    assert max(times) <= small.steps.step_us
    assert {small.run_of[a.at][0] for a in small.allocations.actions} >= {"param", "fwd", "bwd"}


def test_without_a_time_model_each_op_is_one_microsecond_and_it_says_so():
    from attnprof.profiler.timeline.build import point_timeline

    t = point_timeline(point(layers=1), rates=None)
    assert not t.steps.timed and t.steps.step_us == len(t.steps.ops)
    assert any("calibrate" in n for n in t.notes)


@pytest.mark.parametrize("p", [point("sdpa", "none", "attention", dtype="bfloat16", d_model=64),
                               point("full", "none", "attention", dtype="bfloat16", d_model=64),
                               point("sdpa", "none", "attention", d_model=64)],
                         ids=["sdpa-bf16", "full-bf16", "sdpa-fp32"])
def test_at_scope_attention_the_gpu_timeline_holds_the_projections_as_the_model_does(p):
    """At scope attention the GPU holds the module's projections though the tracker counts the
    core's parameters only (memmodel/trace.py ``held_parameters``): the timeline's GPU trace
    holds them too, so its peaks are ``gpu_memory``'s, whatever path built its events."""
    gpu = get_gpu("h200")
    t = timeline_of(p, "h200")
    model = gpu_memory(p, gpu)
    assert model.sdpa_backend == {"sdpa-bfloat16": "cudnn", "full-bfloat16": "", "sdpa-float32": "efficient"}[
        f"{p.variant}-{p.shape.dtype}"]  # the non-math paths: the timeline uses its own trace there
    assert t.allocations.allocated_peak_bytes == model.allocated_peak_bytes
    assert t.allocations.reserved_peak_bytes == model.reserved_peak_bytes
    assert t.allocations.tensor_peak_bytes == model.tensor_peak_bytes
    held = [e for e in t.events if e[0] == "alloc" and str(e[1]).startswith("device.uncounted")]
    assert sum(e[2] for e in held) == 4 * 64 * 64 * {"bfloat16": 2, "float32": 4}[p.shape.dtype]  # to_in (d -> 3d), to_out (d -> d)
