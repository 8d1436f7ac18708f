"""The tracker's opt-in allocation trace, and a trace recorded for a point."""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.memmodel.caching_allocator import CachingAllocator
from attnprof.profiler.memmodel.sdpa_kernels import substitute
from attnprof.profiler.memmodel.gpu_peak import replay
from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.trace import record_trace
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.measure.tracker import ALLOC, FREE, MARK, OP, MemoryTracker
from attnprof.profiler.records import Point, Shape

MiB = 1 << 20


def test_the_trace_is_off_by_default_and_changes_no_figure():
    def run(**kw):
        with MemoryTracker(**kw) as t:
            a = torch.empty(MiB // 4)
            b = a + 1
            del a
            c = b * 2
            del b, c
        return t

    off, on = run(), run(trace=True)
    assert off.trace is None
    assert (off.peak_bytes, off.current_bytes) == (on.peak_bytes, on.current_bytes) == (2 * MiB, 0)
    kinds = [e[0] for e in on.trace]
    assert kinds == [OP, ALLOC, OP, ALLOC, FREE, OP, ALLOC, FREE, FREE]
    ops = [e[1] for e in on.trace if e[0] == OP]
    assert ops == ["empty.memory_format", "add.Tensor", "mul.Tensor"]
    allocs = [e for e in on.trace if e[0] == ALLOC]
    assert [e[2] for e in allocs] == [MiB] * 3 and allocs[1][3] == "add.Tensor"
    frees = [e[1] for e in on.trace if e[0] == FREE]
    assert frees == [allocs[0][1], allocs[1][1], allocs[2][1]]  # a, then b, then c: in the order they died


def test_sdpa_ops_carry_their_arguments_and_markers_are_kept():
    with FakeTensorMode():
        q, k, v = (torch.randn(1, 2, 128, 64, requires_grad=True) for _ in range(3))
        dout = torch.randn(1, 2, 128, 64)
        with MemoryTracker(trace=True) as t:
            t.track([q, k, v, dout], "inputs")
            o = F.scaled_dot_product_attention(q, k, v)
            t.mark("backward")
            o.backward(dout)
    ops = {e[1].split(".")[0]: e for e in t.trace if e[0] == OP}
    fwd = ops["_scaled_dot_product_flash_attention_for_cpu"]
    bwd = ops["_scaled_dot_product_flash_attention_for_cpu_backward"]
    assert fwd[2]["grad_enabled"] and [a.serial for a in fwd[2]["args"][:3]] == [1, 2, 3]
    q_info = fwd[2]["args"][0]
    assert q_info.shape == (1, 2, 128, 64) and q_info.stride == (1, 8192, 64, 1) and q_info.dtype == "float32"  # size-1: 1
    assert q_info.requires_grad and bwd[2]["args"][0].serial == 4  # grad_out is dout
    assert (MARK, "backward") in t.trace
    i = t.trace.index(fwd)
    assert [e[0] for e in t.trace[i + 1:i + 3]] == [ALLOC, ALLOC]  # out, logsumexp right after their op
    assert t.trace[i + 2][2] == 1 * 2 * 128 * 4  # logsumexp: [B, H, n] fp32 on the CPU too
    others = [e for e in t.trace if e[0] == OP and "scaled_dot_product" not in e[1]]
    assert others and all(e[2] is None for e in others)  # only SDPA ops are described


def _point(variant="sdpa", scope="model", mode="plain", n=512, dtype="float32", layers=2, forward_only=False):
    return Point(variant, mode, scope, Shape(seq_len=n, batch=1, d_model=64, heads=2, layers=layers, dtype=dtype),
                 forward_only)


def test_a_points_trace_has_the_predicted_peak_and_replays_to_it():
    """Without substitution, requested bytes replayed through the allocator follow the
    tracker's live bytes exactly: the trace loses nothing."""
    gpu = get_gpu("a100-80gb")
    for point in (_point(), _point("full", "attention", "none", n=256), _point(mode="checkpoint", dtype="bfloat16"),
                  _point(forward_only=True)):
        trace = record_trace(point)
        assert trace.tensor_peak_bytes == predict(point, exact=True, count_flops=False).peak_bytes, point
        plain = substitute(trace.events, gpu, "math", cublas=False, ops=False)  # no CUDA op rules (cuda_ops.py)
        assert plain.events == trace.events  # nothing to substitute
        r = replay(plain.events, CachingAllocator())
        held = sum(e[2] for e in trace.events if e[0] == ALLOC and str(e[1]).startswith("device.uncounted"))
        assert held == (4 * 64 * 64 * 4 if point.scope == "attention" else 0)  # to_in and to_out, fp32
        assert r.tensor_peak_bytes == trace.tensor_peak_bytes + held, point
        assert r.tensor_peak_bytes <= r.allocated_peak_bytes <= r.reserved_peak_bytes
        assert trace.counts[ALLOC] > 10 and (MARK in trace.counts) != point.forward_only


def test_sdpa_math_trace_has_no_cpu_flash_op_and_a_quadratic_peak():
    flash, math_ = record_trace(_point(n=1024)), record_trace(_point(n=1024), sdpa_math=True)
    names = lambda t: {e[1].split(".")[0] for e in t.events if e[0] == OP}  # noqa: E731
    assert "_scaled_dot_product_flash_attention_for_cpu" in names(flash)
    assert "_scaled_dot_product_flash_attention_for_cpu" not in names(math_) and "bmm" in names(math_)
    assert math_.tensor_peak_bytes > flash.tensor_peak_bytes + 2 * 1024 * 1024 * 4  # n x n fp32 scores, per head


def test_the_step_counters_torch_keeps_on_the_host_are_not_device_allocations():
    """AdamW's 0-dim ``step`` (4 bytes per parameter tensor) lives on the CPU unless the
    step is fused (or capturable): the GPU replay leaves it out; the tracker's peak keeps it."""
    from attnprof.profiler.measure.workload import Workload

    def at(impl):
        return Point("sdpa", "plain", "model", Shape(seq_len=64, batch=1, d_model=32, heads=2, layers=2,
                                                      optimizer="adamw", optimizer_impl=impl))

    tensors = len(Workload(at("foreach")).params)
    for impl, host in (("foreach", True), ("forloop", True), ("fused", False)):
        trace = record_trace(at(impl))
        on_device = [e for e in trace.events if e[0] == ALLOC and e[2] == 4 and e[3] == ""]  # registered, 4 bytes
        assert len(on_device) == (0 if host else tensors), impl
        scalars = [e for e in trace.events if e[0] == ALLOC and e[2] == 4 and e[3].startswith("lift_fresh")]
        assert scalars == [], (impl, scalars)  # foreach's torch.tensor(1.0, device="cpu"): a host scalar
        assert trace.tensor_peak_bytes == predict(at(impl), exact=True, count_flops=False).peak_bytes
        live = replay(trace.events, CachingAllocator())
        assert live.tensor_peak_bytes == trace.tensor_peak_bytes - (4 * tensors if host else 0), impl


def test_the_uncounted_projections_are_held_on_the_device_from_the_start():
    """Issue 39: at scope attention the module is built whole on the device while the tracker
    counts the core's parameters only; the GPU trace holds the projections' weights from the
    first event (the H200 measured them: +8 MiB at d_model 1024 bf16)."""
    trace = record_trace(_point("sdpa", "attention", "none", n=128, dtype="bfloat16"))
    held = [e for e in trace.events if e[0] == ALLOC and str(e[1]).startswith("device.uncounted")]
    assert [e[2] for e in held] == [64 * 192 * 2, 64 * 64 * 2]  # to_in (d -> 3d), to_out (d -> d), bf16
    assert trace.events[:2] == held and not any(e[0] == FREE and e[1] in {h[1] for h in held} for e in trace.events)
