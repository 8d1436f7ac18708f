"""SDPA FLOPs with grouped KV heads (profiler/measure/flops_sdpa.py, issue 38): every backend op a
GPU can run, called with meta tensors of the shapes CUDA passes them (read from each op's schema),
against the closed form 4·b·hq·n·m·d forward, 2.5x that backward, for Hkv in {1, 2, Hq}."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnprof.profiler.measure.flops import REGISTRY, FlopCounter
from attnprof.profiler.measure.flops_sdpa import SDPA_FORMULAS, backward_flops, forward_flops

aten = torch.ops.aten
B, HQ, N, M, D = 2, 8, 48, 40, 16  # n query positions, m key positions


def meta(*shape):
    return torch.empty(*shape, device="meta")


def closed_forward(hq=HQ, n=N, m=M, d=D):
    return 4 * B * hq * n * m * d


def closed_backward(hq=HQ, n=N, m=M, d=D):
    return 10 * B * hq * n * m * d  # 2.5x the forward (torch's sdpa_backward_flop_count)


def heads_first(hkv):
    """q [B, Hq, n, d], k/v [B, Hkv, m, d]: SDPA's own ops and the CPU flash op."""
    return meta(B, HQ, N, D), meta(B, hkv, M, D), meta(B, hkv, M, D)


def seq_first(hkv):
    """q [B, n, Hq, d], k/v [B, m, Hkv, d]: _flash_attention_* and _efficient_attention_*."""
    return meta(B, N, HQ, D), meta(B, M, hkv, D), meta(B, M, hkv, D)


def forward_calls(hkv, causal):
    q, k, v = heads_first(hkv)
    qs, ks, vs = seq_first(hkv)
    return {
        "_scaled_dot_product_flash_attention": (q, k, v, 0.0, causal),
        "_scaled_dot_product_efficient_attention": (q, k, v, None, True, 0.0, causal),
        "_scaled_dot_product_cudnn_attention": (q, k, v, None, True, 0.0, causal),
        "_scaled_dot_product_flash_attention_for_cpu": (q, k, v, 0.0, causal),
        "_scaled_dot_product_fused_attention_overrideable": (q, k, v, None, 0.0, causal),
        "_flash_attention_forward": (qs, ks, vs, None, None, N, M, 0.0, causal, False),
        "_efficient_attention_forward": (qs, ks, vs, None, None, None, N, M, 0.0, int(causal)),
    }


def backward_calls(hkv, causal):
    q, k, v = heads_first(hkv)
    go, out, lse = meta(B, HQ, N, D), meta(B, HQ, N, D), meta(B, HQ, N)
    qs, ks, vs = seq_first(hkv)
    gos, outs, seed = meta(B, N, HQ, D), meta(B, N, HQ, D), meta(2)
    return {
        "_scaled_dot_product_flash_attention_backward":
            (go, q, k, v, out, lse, None, None, N, M, 0.0, causal, seed, seed),
        "_scaled_dot_product_efficient_attention_backward":
            (go, q, k, v, None, out, lse, seed, seed, 0.0, [True, True, True, False], causal),
        "_scaled_dot_product_cudnn_attention_backward":
            (go, q, k, v, out, lse, seed, seed, None, None, None, N, M, 0.0, causal),
        "_scaled_dot_product_flash_attention_for_cpu_backward": (go, q, k, v, out, lse, 0.0, causal),
        "_scaled_dot_product_fused_attention_overrideable_backward":
            (go, q, k, v, None, [True, True, True, False], out, lse, None, None, N, M, 0.0, causal),
        "_flash_attention_backward": (gos, qs, ks, vs, outs, lse, None, None, N, M, 0.0, causal, seed, seed),
        "_efficient_attention_backward":
            (gos, qs, ks, vs, None, outs, None, None, N, M, lse, 0.0, seed, seed, int(causal), False),
    }


def formula(name):
    return REGISTRY[getattr(aten, name)]


@pytest.mark.parametrize("hkv", [1, 2, HQ])
@pytest.mark.parametrize("causal", [False, True])
def test_every_forward_op_counts_the_expanded_computation(hkv, causal):
    for name, args in forward_calls(hkv, causal).items():
        expected = closed_forward() // (2 if causal else 1)
        assert formula(name)(*args) == expected, name


@pytest.mark.parametrize("hkv", [1, 2, HQ])
@pytest.mark.parametrize("causal", [False, True])
def test_every_backward_op_counts_two_and_a_half_forwards(hkv, causal):
    for name, args in backward_calls(hkv, causal).items():
        expected = closed_backward() // (2 if causal else 1)
        assert formula(name)(*args) == expected, name


def test_trailing_defaults_dropped_by_the_dispatcher_read_as_not_causal():
    q, k, v = heads_first(2)
    assert formula("_scaled_dot_product_flash_attention")(q, k, v) == closed_forward()
    assert formula("_scaled_dot_product_efficient_attention")(q, k, v, None, False) == closed_forward()


def test_every_backend_op_of_this_torch_is_ours_not_torchs():
    names = set(forward_calls(1, False)) | set(backward_calls(1, False))
    ours = {op for op in SDPA_FORMULAS}
    assert {getattr(aten, n) for n in names if hasattr(aten, n)} == ours
    assert all(REGISTRY[op] is SDPA_FORMULAS[op] for op in ours)


def test_different_value_head_dim_follows_torchs_formula():
    assert forward_flops(1, 4, 8, 8, 16, 32) == 2 * 4 * 8 * 8 * 16 + 2 * 4 * 8 * 8 * 32
    assert backward_flops(1, 4, 8, 8, 16, 32) == 2 * 4 * 8 * 8 * (3 * 16 + 2 * 32)


@pytest.mark.parametrize("q_heads, kv_heads", [(6, 4), (4, 8)])
def test_heads_that_do_not_group_are_refused_with_the_shapes(q_heads, kv_heads):
    q, k, v = meta(1, q_heads, 8, 16), meta(1, kv_heads, 8, 16), meta(1, kv_heads, 8, 16)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        formula("_scaled_dot_product_flash_attention")(q, k, v)


def test_mismatched_key_and_value_are_refused():
    q, k, v = meta(1, 4, 8, 16), meta(1, 2, 8, 16), meta(1, 2, 9, 16)
    with pytest.raises(ValueError, match="incompatible"):
        formula("_scaled_dot_product_cudnn_attention")(q, k, v, None, True)


def test_jagged_inputs_count_every_sequence_at_its_longest():
    total, offsets = 3 * N, meta(4)  # three sequences
    q, k, v = meta(total, HQ, D), meta(total, 2, D), meta(total, 2, D)
    got = formula("_flash_attention_forward")(q, k, v, offsets, offsets, N, N, 0.0, False, False)
    assert got == forward_flops(3, HQ, N, N, D, D)


@pytest.mark.parametrize("hkv", [1, 2, HQ])
def test_the_math_path_with_grouped_heads_counts_its_matmuls_expanded(hkv):
    # meta tensors take SDPA's math path (../shared/NOTES.md): matmuls counted by torch's mm/bmm
    # formulas; its backward keeps the scores, so it runs four matmuls, not the fused kernels' five
    q = meta(B, HQ, N, D).requires_grad_()
    k, v = (meta(B, hkv, M, D).requires_grad_() for _ in range(2))
    with FlopCounter() as counter:
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert counter.total == closed_forward()
    with FlopCounter() as counter:
        out.backward(torch.empty_like(out))
    assert counter.total == 2 * closed_forward()


@pytest.mark.parametrize("hkv", [1, 2])
def test_a_real_grouped_call_on_this_cpu_is_counted(hkv):
    q = torch.randn(B, HQ, N, D, requires_grad=True)
    k, v = (torch.randn(B, hkv, M, D, requires_grad=True) for _ in range(2))
    with FlopCounter() as counter:
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        out.backward(torch.randn_like(out))
    assert counter.total == closed_forward() + closed_backward()


def test_torch_2_11s_formulas_that_refuse_grouped_heads_are_never_called(monkeypatch):
    """torch 2.11's sdpa_flop_count asserted equal heads (the H200's error, issue 38): with
    torch's formulas made to refuse the same way, a grouped call is still counted."""
    from torch.utils import flop_counter

    def refuse(*shapes):
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")

    monkeypatch.setattr(flop_counter, "sdpa_flop_count", refuse)
    monkeypatch.setattr(flop_counter, "sdpa_backward_flop_count", refuse)
    q = torch.randn(B, HQ, N, D, requires_grad=True)
    k, v = (torch.randn(B, 2, M, D, requires_grad=True) for _ in range(2))
    with FlopCounter() as counter:
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=False)
        out.backward(torch.randn_like(out))
    assert counter.total == closed_forward() + closed_backward()
