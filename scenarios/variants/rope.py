"""Rotary position embedding (RoPE): q and k rotated by their positions, pair by pair.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv
2104.09864, §3.4 (Eq. 34): channel pair i of the token at position m is rotated by the
angle m * theta_i, theta_i = base^(-2i/dh), base 10000. Then q_m . k_n depends on m - n only.

Written as Llama / GPT-NeoX code computes it (Hugging Face transformers' ``LlamaRotaryEmbedding``
and ``apply_rotary_pos_emb``), so its temporaries are the ones users' models allocate:
``rotate_half`` pairs channel i with channel i + dh/2 (the same rotation on a fixed
permutation of the channels), the cos/sin tables are built in fp32 (fp64 for fp64 inputs)
from the positions at every forward and cast to the inputs' dtype, and every product and
sum is a new tensor. Nothing here is assumed about their size: the tracker counts what
torch allocates. Not a variant: ``base.Attention.attend`` applies it to every variant.
"""

from __future__ import annotations

import torch

BASE = 10000.0  # RoFormer §3.4's theta base (and Llama's rope_theta default)


def rotary_tables(n: int, head_dim: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin, each (n, dh) in ``dtype``: angle m * theta_i in channels i and i + dh/2."""
    work = torch.promote_types(dtype, torch.float32)  # fp32 tables for fp16/bf16, as Llama code
    inv_freq = 1.0 / (BASE ** (torch.arange(0, head_dim, 2, device=device, dtype=work) / head_dim))  # (dh/2,)
    positions = torch.arange(n, device=device, dtype=work)  # (n,)
    freqs = torch.outer(positions, inv_freq)  # (n, dh/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (n, dh)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., dh) -> (..., dh): (x1, x2) -> (-x2, x1) on the two halves of the channels."""
    x1, x2 = x.chunk(2, dim=-1)  # each (..., dh/2)
    return torch.cat((-x2, x1), dim=-1)  # (..., dh)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, h, n, dh) with tables (n, dh) -> x rotated, (B, h, n, dh)."""
    return x * cos + rotate_half(x) * sin


def rotate_qk(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, h, n, dh), k (B, K, n, dh) -> both rotated. A shared query/key tensor (Reformer's
    shared QK: ``k is q``) is rotated once and stays shared: the same position rotates the
    same vector, so q_m . k_n still depends on m - n only."""
    n, dh = q.shape[-2], q.shape[-1]
    cos, sin = rotary_tables(n, dh, q.dtype, q.device)  # each (n, dh)
    rq = rotate(q, cos, sin)  # (B, h, n, dh)
    return rq, (rq if k is q else rotate(k, cos, sin))
