"""FLOPs of every SDPA backend op, grouped KV heads included (issue 38).

Why not torch's own formulas: torch 2.11's ``torch.utils.flop_counter.sdpa_flop_count``
asserts that q, k and v have the same head count, yet with ``enable_gqa`` a GPU's SDPA
ops get K/V with fewer heads than Q (every grouped-KV point on the lent H200 ended
``error``: ../shared/gpu-runs/h200-2026-12-04/README.md). torch 2.13's formulas take
grouped heads, but count ``_flash_attention_forward`` / ``_efficient_attention_forward``
(and their backwards) on the wrong axes: those take [B, n, H, d], and torch reads the
shape as [B, H, n, d]. So the counts here are torch 2.13's own (``sdpa_flop_count``,
``sdpa_backward_flop_count`` in torch/utils/flop_counter.py), written for every layout:

- forward: QK^T and PV, two matmuls per query head over every key:
  2·b·hq·nq·nk·d + 2·b·hq·nq·nk·dv (4·b·hq·n²·d when dv = d and nk = nq = n);
- backward: QK^T recomputed, dO·V^T, P^T·dO, dS·K, Q^T·dS: 2·b·hq·nq·nk·(3·d + 2·dv)
  (2.5x the forward when dv = d).

Grouped KV heads (hk < hq, hq a multiple of hk) count as the expanded computation: the
kernels broadcast each K/V head to its group of query heads, so every query head does
the full work. Causal calls are halved, as for the CPU flash kernel (profiler/measure/
flops.py): flash, memory-efficient and cuDNN kernels all skip fully masked blocks
(FlashAttention-2, Dao 2023, §3.1). Nested (jagged) inputs, which attnprof never builds,
count every sequence at its maximum length: an upper bound, as torch does for fake tensors.
The math backend is not here: it decomposes into matmuls, counted by torch's mm/bmm formulas.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _dims(query, key, value, heads_first: bool) -> tuple:
    """(b, hq, hk, nq, nk, d, dv) of a dense call; [B, H, n, d] when heads_first, else [B, n, H, d]."""
    shapes = [tuple(t.shape) for t in (query, key, value)]
    if any(len(s) != 4 for s in shapes):
        raise ValueError(f"SDPA FLOPs: expected 4-D query/key/value, got {shapes}")
    if not heads_first:
        shapes = [(s[0], s[2], s[1], s[3]) for s in shapes]  # [B, n, H, d] -> [B, H, n, d]
    (b, hq, nq, d), (bk, hk, nk, dk), (bv, hv, nv, dv) = shapes
    if not (b == bk == bv and hk == hv and nk == nv and d == dk):
        raise ValueError(f"SDPA FLOPs: query/key/value shapes are incompatible: q={shapes[0]}, "
                         f"k={shapes[1]}, v={shapes[2]} (as [B, H, n, d])")
    if hk < 1 or hq % hk:
        raise ValueError(f"SDPA FLOPs: query heads ({hq}) must be a multiple of key/value heads ({hk})")
    return b, hq, hk, nq, nk, d, dv


def forward_flops(b: int, hq: int, nq: int, nk: int, d: int, dv: int) -> int:
    """QK^T [b·hq, nq, d] x [d, nk] and PV [b·hq, nq, nk] x [nk, dv], 2 FLOPs per multiply-add."""
    return 2 * b * hq * nq * nk * d + 2 * b * hq * nq * nk * dv


def backward_flops(b: int, hq: int, nq: int, nk: int, d: int, dv: int) -> int:
    """torch's sdpa_backward_flop_count: five matmuls, three over d and two over dv."""
    return 2 * b * hq * nq * nk * (3 * d + 2 * dv)


def _dense(query, key, value, heads_first: bool, backward: bool, causal: bool) -> int:
    b, hq, _hk, nq, nk, d, dv = _dims(query, key, value, heads_first)
    flops = (backward_flops if backward else forward_flops)(b, hq, nq, nk, d, dv)
    return flops // 2 if causal else flops


def _kernel(query, key, value, offsets, max_q, max_k, backward: bool, causal: bool) -> int:
    """The kernels' own layout: [B, n, H, d]; jagged inputs (offsets given) [total, H, d] (flash)
    or [1, total, H, d] (efficient), each of the len(offsets) - 1 sequences counted at its
    maximum length (an upper bound; module docstring)."""
    if offsets is None:
        return _dense(query, key, value, False, backward, causal)
    q, k, v = (t.reshape(1, *t.shape[-3:]) for t in (query, key, value))  # [1, total, H, d]
    _b, hq, _hk, _n, _m, d, dv = _dims(q, k, v, heads_first=False)
    flops = (backward_flops if backward else forward_flops)(offsets.shape[0] - 1, hq, int(max_q), int(max_k), d, dv)
    return flops // 2 if causal else flops


# --- the ops, one function per schema (argument names and defaults as torch declares them;
# torch's dispatch drops trailing default arguments, so every default is given here) ---------
def sdpa_forward(query, key, value, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
    """_scaled_dot_product_flash_attention, ..._flash_attention_for_cpu (q/k/v [B, H, n, d])."""
    return _dense(query, key, value, True, False, bool(is_causal))


def overrideable_sdpa_forward(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                              *args, **kwargs) -> int:
    """_scaled_dot_product_fused_attention_overrideable ([B, H, n, d])."""
    return _dense(query, key, value, True, False, bool(is_causal))


def sdpa_forward_with_bias(query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                           is_causal=False, *args, **kwargs) -> int:
    """_scaled_dot_product_efficient_attention, _scaled_dot_product_cudnn_attention ([B, H, n, d])."""
    return _dense(query, key, value, True, False, bool(is_causal))


def flash_sdpa_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                        dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
    """_scaled_dot_product_flash_attention_backward ([B, H, n, d])."""
    return _dense(query, key, value, True, True, bool(is_causal))


def efficient_sdpa_backward(grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed,
                            philox_offset, dropout_p=0.0, grad_input_mask=None, is_causal=False,
                            *args, **kwargs) -> int:
    """_scaled_dot_product_efficient_attention_backward ([B, H, n, d])."""
    return _dense(query, key, value, True, True, bool(is_causal))


def cudnn_sdpa_backward(grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
                        cum_seq_q, cum_seq_k, max_q, max_k, dropout_p=0.0, is_causal=False,
                        *args, **kwargs) -> int:
    """_scaled_dot_product_cudnn_attention_backward ([B, H, n, d])."""
    return _dense(query, key, value, True, True, bool(is_causal))


def overrideable_sdpa_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                               cum_seq_q, cum_seq_k, max_q, max_k, dropout_p=0.0, is_causal=False,
                               *args, **kwargs) -> int:
    """_scaled_dot_product_fused_attention_overrideable_backward ([B, H, n, d])."""
    return _dense(query, key, value, True, True, bool(is_causal))


def cpu_flash_backward(grad_out, query, key, value, out, logsumexp, dropout_p=0.0, is_causal=False,
                       *args, **kwargs) -> int:
    """_scaled_dot_product_flash_attention_for_cpu_backward ([B, H, n, d])."""
    return _dense(query, key, value, True, True, bool(is_causal))


def flash_kernel_forward(query, key, value, cum_seq_q=None, cum_seq_k=None, max_q=0, max_k=0, dropout_p=0.0,
                         is_causal=False, *args, **kwargs) -> int:
    """_flash_attention_forward: q/k/v [B, n, H, d], or [total, H, d] with cum_seq_q."""
    return _kernel(query, key, value, cum_seq_q, max_q, max_k, False, bool(is_causal))


def flash_kernel_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q=None, cum_seq_k=None, max_q=0,
                          max_k=0, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
    """_flash_attention_backward: as _flash_attention_forward."""
    return _kernel(query, key, value, cum_seq_q, max_q, max_k, True, bool(is_causal))


def efficient_kernel_forward(query, key, value, bias=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                             max_seqlen_k=None, dropout_p=0.0, custom_mask_type=0, *args, **kwargs) -> int:
    """_efficient_attention_forward: q/k/v [B, n, H, d] ([1, total, H, d] with cu_seqlens_q);
    custom_mask_type 0 is no mask, 1 and 2 causal (attention.cu, CustomMaskType)."""
    return _kernel(query, key, value, cu_seqlens_q, max_seqlen_q or 0, max_seqlen_k or 0, False,
                         bool(custom_mask_type))


def efficient_kernel_backward(grad_out_, query, key, value, bias, out, cu_seqlens_q=None, cu_seqlens_k=None,
                              max_seqlen_q=0, max_seqlen_k=0, logsumexp=None, dropout_p=0.0, philox_seed=None,
                              philox_offset=None, custom_mask_type=0, *args, **kwargs) -> int:
    """_efficient_attention_backward: as _efficient_attention_forward."""
    return _kernel(query, key, value, cu_seqlens_q, max_seqlen_q or 0, max_seqlen_k or 0, True,
                         bool(custom_mask_type))


def _ops() -> dict:
    """Every SDPA backend op this torch has -> its formula (an op a torch lacks is left out)."""
    table = {
        "_scaled_dot_product_flash_attention": sdpa_forward,
        "_scaled_dot_product_flash_attention_backward": flash_sdpa_backward,
        "_scaled_dot_product_efficient_attention": sdpa_forward_with_bias,
        "_scaled_dot_product_efficient_attention_backward": efficient_sdpa_backward,
        "_scaled_dot_product_cudnn_attention": sdpa_forward_with_bias,
        "_scaled_dot_product_cudnn_attention_backward": cudnn_sdpa_backward,
        "_scaled_dot_product_fused_attention_overrideable": overrideable_sdpa_forward,
        "_scaled_dot_product_fused_attention_overrideable_backward": overrideable_sdpa_backward,
        "_scaled_dot_product_flash_attention_for_cpu": sdpa_forward,
        "_scaled_dot_product_flash_attention_for_cpu_backward": cpu_flash_backward,
        "_flash_attention_forward": flash_kernel_forward,
        "_flash_attention_backward": flash_kernel_backward,
        "_efficient_attention_forward": efficient_kernel_forward,
        "_efficient_attention_backward": efficient_kernel_backward,
    }
    return {getattr(aten, name): formula for name, formula in table.items() if hasattr(aten, name)}


SDPA_FORMULAS = _ops()
