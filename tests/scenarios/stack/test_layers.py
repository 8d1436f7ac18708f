"""The block's parts (scenarios.stack.layers): SwiGLU and RMSNorm against dense references
written out here, forward and every gradient (by hand, not by autograd); the fallback
RMSNorm equals torch's; and a stack built with them has them everywhere, and only them."""

import pytest
import torch
from torch import nn

from attnprof.profiler.records import Shape, ShapeError
from attnprof.scenarios.stack import layers
from attnprof.scenarios.stack.cuda_rms_norm import CudaRMSNorm
from attnprof.scenarios.stack.blocks import Stack
from attnprof.scenarios.stack.layers import RMS_EPS, RMSNorm, RMSNormFallback, SwiGLU, mlp_layer, norm_layer
from attnprof.scenarios.variants.registry import parse_variant

B, N, D, D_FF = 2, 5, 8, 12


def f64(*shape, seed: int):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def swiglu_reference(x, w1, w2, w3, dy):
    """Shazeer 2020 eq. 6, y = (silu(x W1^T) * x W3^T) W2^T, and its gradients derived by hand:
    silu(a) = a s(a), silu'(a) = s(a) (1 + a (1 - s(a))), s the logistic sigmoid."""
    a, b = x @ w1.T, x @ w3.T  # (B, n, d_ff) each
    sig = 1 / (1 + torch.exp(-a))
    h = a * sig * b
    y = h @ w2.T  # (B, n, d)
    dh = dy @ w2  # (B, n, d_ff)
    da = dh * b * sig * (1 + a * (1 - sig))
    db = dh * a * sig
    tokens = lambda t: t.reshape(-1, t.shape[-1])  # (B*n, width)
    grads = {"x": da @ w1 + db @ w3, "w1": tokens(da).T @ tokens(x), "w2": tokens(dy).T @ tokens(h),
             "w3": tokens(db).T @ tokens(x)}
    return y, grads


def rmsnorm_reference(x, g, eps, dy):
    """Zhang & Sennrich 2019 eq. 4, y = x / sqrt(mean(x^2) + eps) * g, and its gradients by hand:
    with r = (mean(x^2) + eps)^(-1/2) and u = dy * g, dx = r u - r^3 x mean(u x)."""
    r = 1 / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)  # (B, n, 1)
    y = x * r * g
    u = dy * g
    dx = r * u - r ** 3 * x * (u * x).mean(-1, keepdim=True)
    dg = (dy * x * r).reshape(-1, x.shape[-1]).sum(0)
    return y, {"x": dx, "weight": dg}


def test_swiglu_equals_its_dense_reference_forward_and_gradients():
    torch.manual_seed(0)
    mlp = SwiGLU(D, D_FF).double()
    assert all(not isinstance(m, nn.Linear) or m.bias is None for m in mlp.modules())  # no biases, as in Llama
    x, dy = f64(B, N, D, seed=1).requires_grad_(), f64(B, N, D, seed=2)
    y = mlp(x)
    y.backward(dy)
    want, grads = swiglu_reference(x.detach(), mlp.w1.weight.detach(), mlp.w2.weight.detach(),
                                   mlp.w3.weight.detach(), dy)
    torch.testing.assert_close(y.detach(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, grads["x"], rtol=1e-12, atol=1e-12)
    for name in ("w1", "w2", "w3"):
        torch.testing.assert_close(getattr(mlp, name).weight.grad, grads[name], rtol=1e-12, atol=1e-12)


def test_the_swiglu_reference_tells_the_gate_from_the_up_projection():
    """The comparison above can fail: swapping w1 and w3 (silu on the wrong branch) is caught."""
    torch.manual_seed(0)
    mlp = SwiGLU(D, D_FF).double()
    x, dy = f64(B, N, D, seed=1), f64(B, N, D, seed=2)
    swapped, _ = swiglu_reference(x, mlp.w3.weight.detach(), mlp.w2.weight.detach(), mlp.w1.weight.detach(), dy)
    assert not torch.allclose(mlp(x).detach(), swapped, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: RMSNorm(D, eps=RMS_EPS), lambda: RMSNormFallback(D),
                                  lambda: CudaRMSNorm(RMSNorm(D, eps=RMS_EPS))],
                         ids=["torch", "fallback", "cuda-fused"])  # cuda-fused: a GPU's step traced on the CPU
def test_rmsnorm_equals_its_dense_reference_forward_and_gradients(make):
    norm = make().double()
    with torch.no_grad():
        norm.weight.copy_(1 + f64(D, seed=3) / 4)  # not all ones: the weight's gradient and use both show
    x, dy = (3 * f64(B, N, D, seed=4)).requires_grad_(), f64(B, N, D, seed=5)
    y = norm(x)
    y.backward(dy)
    want, grads = rmsnorm_reference(x.detach(), norm.weight.detach(), RMS_EPS, dy)
    torch.testing.assert_close(y.detach(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, grads["x"], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(norm.weight.grad, grads["weight"], rtol=1e-12, atol=1e-12)
    # not a LayerNorm: no mean is subtracted (the reference with one differs)
    centred, _ = rmsnorm_reference(x.detach() - x.detach().mean(-1, keepdim=True), norm.weight.detach(), RMS_EPS, dy)
    assert not torch.allclose(y.detach(), centred)


def test_torchs_rmsnorm_is_the_one_used_where_torch_has_it():
    assert hasattr(nn, "RMSNorm")  # torch 2.4 and later; the 2.13 here and the GPU machine's 2.11
    assert RMSNorm is nn.RMSNorm and isinstance(norm_layer("rmsnorm", D), nn.RMSNorm)
    assert norm_layer("rmsnorm", D).eps == RMS_EPS
    assert isinstance(norm_layer("layernorm", D), nn.LayerNorm)
    assert layers.RMSNormFallback is not nn.RMSNorm


def test_ffn_dim_sets_the_hidden_width_of_either_mlp():
    gelu, swiglu = mlp_layer("gelu", D, D_FF), mlp_layer("swiglu", D, D_FF)
    assert [tuple(p.shape) for p in gelu.parameters()] == [(D_FF, D), (D_FF,), (D, D_FF), (D,)]
    assert sorted(tuple(p.shape) for p in swiglu.parameters()) == sorted([(D_FF, D), (D, D_FF), (D_FF, D)])
    with pytest.raises(ValueError, match="unknown mlp"):
        mlp_layer("relu", D, D_FF)
    with pytest.raises(ValueError, match="unknown norm"):
        norm_layer("batchnorm", D)


def norms_and_mlps(shape: Shape):
    stack = Stack(parse_variant("full"), shape, "plain")
    kinds = [type(m).__name__ for m in stack.modules() if isinstance(m, (nn.LayerNorm, RMSNorm, SwiGLU, nn.GELU))]
    return stack, kinds


def test_a_stack_has_the_chosen_norm_everywhere_and_the_chosen_mlp_in_every_block():
    base = Shape(seq_len=16, d_model=16, heads=2, layers=3)
    _, kinds = norms_and_mlps(base)
    assert sorted(kinds) == sorted(["LayerNorm"] * 7 + ["GELU"] * 3)  # 2 pre-norms per block + the final norm
    stack, kinds = norms_and_mlps(Shape(seq_len=16, d_model=16, heads=2, layers=3, mlp="swiglu", norm="rmsnorm",
                                        ffn_dim=40))
    assert sorted(kinds) == sorted(["RMSNorm"] * 7 + ["SwiGLU"] * 3)
    assert isinstance(stack.norm, RMSNorm) and all(isinstance(b.f.norm, RMSNorm) and isinstance(b.g.norm, RMSNorm)
                                                   for b in stack.blocks)
    assert all(b.g.fn.net.w1.weight.shape == (40, 16) for b in stack.blocks)
    # the norm alone, the mlp alone
    _, kinds = norms_and_mlps(Shape(seq_len=16, d_model=16, heads=2, layers=1, norm="rmsnorm"))
    assert sorted(kinds) == sorted(["RMSNorm"] * 3 + ["GELU"])
    _, kinds = norms_and_mlps(Shape(seq_len=16, d_model=16, heads=2, layers=1, mlp="swiglu"))
    assert sorted(kinds) == sorted(["LayerNorm"] * 3 + ["SwiGLU"])


def test_d_ff_is_ffn_dim_or_ff_mult_times_d_model():
    assert Shape(d_model=64).d_ff == 256 and Shape(d_model=64, ffn_dim=688).d_ff == 688
    assert Shape(d_model=64, ff_mult=2).d_ff == 128


@pytest.mark.parametrize("field, value", [("mlp", "relu"), ("norm", "batchnorm"), ("ffn_dim", -1), ("mlp", 1)])
def test_a_shape_refuses_an_unknown_block_option_in_one_line(field, value):
    with pytest.raises(ShapeError) as caught:
        Shape(**{field: value})
    assert field in str(caught.value) and "\n" not in str(caught.value)
