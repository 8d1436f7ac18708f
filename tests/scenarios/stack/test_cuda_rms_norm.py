"""RMSNorm as CUDA runs it (scenarios/stack/cuda_rms_norm.py, issue 39): the same values and
gradients as torch's own RMSNorm (and as the dense reference: test_layers.py); the allocations and saved tensors of
torch 2.11's ``_fused_rms_norm_cuda`` / ``_fused_rms_norm_backward_cuda``, in their order; torch's
composite where CUDA falls back to it; and the swap keeps every parameter where it was."""

import pytest
import torch
from torch import nn

from attnprof.profiler.measure.tracker import ALLOC, OP, MemoryTracker
from attnprof.profiler.timemodel.op_classes import kernel_class
from attnprof.scenarios.stack.cuda_rms_norm import CudaRMSNorm, fused_rms_norm, use_cuda_kernels
from attnprof.scenarios.stack.layers import RMS_EPS, norm_layer

B, N, D = 2, 5, 8


def _f64(*shape, seed: int):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _norm(dtype=torch.float64) -> nn.Module:
    norm = norm_layer("rmsnorm", D).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(1 + _f64(D, seed=3) / 4)  # not all ones: the weight's gradient and use both show
    return norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_rms_norm_equals_torchs_rms_norm_in_low_precision_too(dtype):
    torch_norm = _norm(dtype)
    x = (3 * _f64(B, N, D, seed=4)).to(dtype).requires_grad_()
    dy = _f64(B, N, D, seed=5).to(dtype)
    ours = CudaRMSNorm(torch_norm)
    grads = []
    for module in (torch_norm, ours):
        x.grad = torch_norm.weight.grad = None
        y = module(x)
        y.backward(dy)
        grads.append((y.detach(), x.grad, torch_norm.weight.grad))
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    for a, b in zip(*grads):
        assert a.dtype == b.dtype == dtype
        torch.testing.assert_close(a, b, **tol)


def _traced(norm: nn.Module, x: torch.Tensor, dy: torch.Tensor):
    """The tracker's events of one forward and backward, the serials of what was saved for backward
    (nothing is registered: the input and the weight are counted when saved, as activations), and
    the input's and the weight's serials."""
    with MemoryTracker(trace=True) as tracker:
        y = norm(x)
        tracker.mark("backward")
        y.backward(dy)
        saved = {serial for serial, kind in tracker.categories().items() if kind == "activations"}
        serial_of = {name: tracker.live_serials([t]) for name, t in (("x", x), ("weight", norm.weight))}
    return tracker.trace, saved, {name: found[0] for name, found in serial_of.items() if found}


@pytest.mark.parametrize("dtype, acc_bytes", [(torch.bfloat16, 4), (torch.float32, 4), (torch.float64, 8)])
def test_it_allocates_what_the_cuda_kernels_allocate_in_their_order(dtype, acc_bytes):
    """Forward: Y like the input, then rstd, one accumulate-type value per row (float32 for a
    bfloat16 input); saved: the input, the weight and rstd; backward: dX like the input, then
    dgamma like the weight. One op each way, named as torch's; no zeros for rstd's gradient."""
    norm = CudaRMSNorm(_norm(dtype))
    x = _f64(B, N, D, seed=4).to(dtype).requires_grad_()
    dy = _f64(B, N, D, seed=5).to(dtype)
    trace, saved, serial_of = _traced(norm, x, dy)
    ops = [e[1] for e in trace if e[0] == OP and kernel_class(e[1]) != "view"]  # (custom ops' autograd detaches)
    assert ops == ["_fused_rms_norm.default", "_fused_rms_norm_backward.default"]
    allocs = [(e[2], e[3]) for e in trace if e[0] == ALLOC and e[3]]
    item = x.element_size()
    assert allocs == [(B * N * D * item, "_fused_rms_norm.default"), (B * N * acc_bytes, "_fused_rms_norm.default"),
                      (B * N * D * item, "_fused_rms_norm_backward.default"), (D * item, "_fused_rms_norm_backward.default")]
    rstd = next(e[1] for e in trace if e[0] == ALLOC and e[2] == B * N * acc_bytes)
    assert saved == {serial_of["x"], serial_of["weight"], rstd}


def test_without_a_weight_gradient_dgamma_is_not_made():
    """output_mask: a frozen weight gets no dgamma, as in _fused_rms_norm_backward_cuda."""
    norm = CudaRMSNorm(_norm(torch.float32))
    norm.weight.requires_grad_(False)
    x = _f64(B, N, D, seed=4).float().requires_grad_()
    trace, _, _ = _traced(norm, x, _f64(B, N, D, seed=5).float())
    assert [e[2] for e in trace if e[0] == ALLOC and e[3] == "_fused_rms_norm_backward.default"] == [B * N * D * 4]
    assert norm.weight.grad is None and x.grad is not None


@pytest.mark.filterwarnings("ignore:Mismatch dtype")  # torch says it cannot use its fused kernel: the point
def test_a_weight_of_another_dtype_takes_torchs_composite_as_cuda_does():
    """rms_norm_symint: a weight whose dtype is not the input's cannot use the fused kernel."""
    norm = CudaRMSNorm(_norm(torch.float32))
    x = _f64(B, N, D, seed=4).to(torch.bfloat16).requires_grad_()
    trace, _, _ = _traced(norm, x, _f64(B, N, D, seed=5).float())
    ops = {e[1] for e in trace if e[0] == OP}
    assert "_fused_rms_norm.default" not in ops and "rsqrt.default" in ops
    torch.testing.assert_close(norm(x), torch.nn.functional.rms_norm(x, (D,), norm.weight, RMS_EPS))
    assert fused_rms_norm(x.detach().float(), (D,), None, None).shape == (B, N, D)  # no weight: fused, no dgamma


def test_the_swap_keeps_every_parameter_in_its_place():
    from attnprof.profiler.records import Shape
    from attnprof.scenarios.stack.blocks import Stack
    from attnprof.scenarios.variants.registry import parse_variant

    torch.manual_seed(0)
    stack = Stack(parse_variant("sdpa"), Shape(seq_len=16, d_model=D, heads=2, layers=2, norm="rmsnorm"))
    before = list(stack.parameters())
    assert use_cuda_kernels(stack) == 5  # two per block and the final one
    assert [id(p) for p in stack.parameters()] == [id(p) for p in before]
    assert not any(type(m) is nn.RMSNorm for m in stack.modules())
    layer_norms = Stack(parse_variant("sdpa"), Shape(seq_len=16, d_model=D, heads=2, layers=2))
    assert use_cuda_kernels(layer_norms) == 0
