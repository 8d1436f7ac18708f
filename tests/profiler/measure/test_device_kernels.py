"""A point as a device runs it (profiler/measure/device_kernels.py, issues 24 and 39): a GPU's
prediction traces the optimizer torch.optim picks there and the kernels CUDA runs (RMSNorm's
fused kernel); the fast prediction of such a point equals its full fake run; the prediction
cache keeps it apart from the CPU's; the CPU's own points are untouched."""

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.measure.optimizer import default_impl
from attnprof.profiler.memmodel.trace import record_trace
from attnprof.profiler.predict import cache as prediction_cache
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.records import Point, Shape


def _point(mode="plain", **shape):
    return Point("sdpa", mode, "model", Shape(**{"seq_len": 64, "d_model": 32, "heads": 2, **shape}))


def test_on_device_writes_out_the_implementation_and_the_kernels_that_device_would_run():
    """issue 24: a GPU's prediction (the memory model, the GPU time model, the GPU timeline, a
    CUDA sweep's predicted peak) traces the step that device runs: foreach by default on CUDA;
    issue 39: with CUDA's kernels. The identity stays the point's."""
    adamw = _point(optimizer="adamw")
    assert on_device(adamw, "cpu") is adamw
    on_gpu = on_device(adamw, "cuda:1")
    assert on_gpu.shape.optimizer_impl == default_impl("cuda") == "foreach" and on_gpu.kernels == "cuda"
    assert on_device(adamw, "cuda").variant == adamw.variant
    named = _point(optimizer="adamw", optimizer_impl="forloop")
    assert on_device(named, "cuda").shape == named.shape
    plain = _point()
    assert on_device(plain, "cuda").key() == plain.key() and on_device(plain, "cuda") != plain
    with pytest.raises(ValueError, match="kernels"):
        Point("sdpa", "plain", "model", Shape(), kernels="tpu")


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
@pytest.mark.parametrize("dtype, layers", [("bfloat16", 5), ("float32", 1), ("float32", 5)])
def test_a_gpu_step_with_rmsnorm_is_predicted_exactly_on_every_path(mode, dtype, layers):
    """The fast prediction (a small point's real run, or three layers traced and composed)
    equals the full fake run of the same point with CUDA's kernels, to the byte."""
    point = on_device(_point(mode, dtype=dtype, layers=layers, norm="rmsnorm", mlp="swiglu"), "cuda")
    assert small_point(point) == (dtype == "float32")
    assert predict(point).peak_bytes == account(point, fake=True).peak_bytes


@pytest.mark.parametrize("mode", ["plain", "checkpoint"])
def test_cuda_kernels_change_a_rmsnorm_step_and_nothing_else(mode):
    """The fused kernel saves the input and one float32 value per row where the CPU's
    composite saves two float32 copies of a bfloat16 input: less memory, fewer ops. A
    LayerNorm step is the same on both (its CUDA differences are the GPU model's: cuda_ops)."""
    rms = _point(mode, seq_len=256, layers=2, dtype="bfloat16", norm="rmsnorm")
    cpu, gpu = predict(rms), predict(on_device(rms, "cuda"))
    assert gpu.peak_bytes < cpu.peak_bytes
    ops = lambda acc: {row[1] for row in acc.op_costs}
    assert "_fused_rms_norm.default" in ops(gpu) and "rsqrt.default" not in ops(gpu)
    assert "rsqrt.default" in ops(cpu) and "_fused_rms_norm.default" not in ops(cpu)
    layer = _point(mode, seq_len=256, layers=2, dtype="bfloat16")
    assert predict(layer).peak_bytes == predict(on_device(layer, "cuda")).peak_bytes


def test_the_prediction_cache_keeps_a_gpu_step_apart_from_the_cpus():
    rms = _point(norm="rmsnorm", dtype="bfloat16")
    assert prediction_cache.key_of(rms) != prediction_cache.key_of(on_device(rms, "cuda"))
    assert prediction_cache.key_of(rms)["point"] == prediction_cache.key_of(on_device(rms, "cuda"))["point"]


def test_the_gpu_memory_models_trace_runs_the_fused_kernel():
    """memmodel/trace.py traces every point as CUDA runs it, whatever the point says."""
    events = record_trace(_point(norm="rmsnorm", dtype="bfloat16", layers=1)).events
    ops = {e[1] for e in events if e[0] == "op"}
    assert {"_fused_rms_norm.default", "_fused_rms_norm_backward.default"} <= ops and "rsqrt.default" not in ops
