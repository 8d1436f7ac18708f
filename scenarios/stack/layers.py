"""The block's interchangeable parts: its feed-forward (``--mlp``) and its norm (``--norm``).

Llama-style blocks (Touvron et al. 2023, "LLaMA", arXiv 2302.13971, §2.2) swap both of
the original pre-norm block's parts, and each changes what backward keeps:

- SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", arXiv 2002.05202, eq. 6):
  ``w2(silu(w1 x) * w3 x)``, three bias-free weights, two hidden tensors of width d_ff
  where the GELU MLP has one. Llama's ``intermediate_size`` is that d_ff (``--ffn-dim``).
- RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", arXiv
  1910.07467, eq. 4): ``x / sqrt(mean(x^2) + eps) * g``, no mean subtracted, no bias.
  It is torch's own ``nn.RMSNorm`` where the running torch has it (2.4 and later: the
  2.13 here and the 2.11 of the GPU machine both do), so the ops traced and measured
  are the ones a model using torch's module runs; an older torch gets ``RMSNormFallback``,
  the same formula written out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Llama's rms_norm_eps in Hugging Face's LlamaConfig default (1e-6); LayerNorm keeps torch's 1e-5.
RMS_EPS = 1e-6


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x), no biases (Shazeer 2020 eq. 6; Llama's LlamaMLP). The names
    follow Llama's reference code (w1: gate, w3: up, w2: down)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):  # (B, n, d) -> (B, n, d)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # hidden: two (B, n, d_ff), their product one more


class RMSNormFallback(nn.Module):
    """RMSNorm written out, for a torch without ``nn.RMSNorm`` (same formula, same weight)."""

    def __init__(self, d_model: int, eps: float = RMS_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):  # (B, n, d)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


RMSNorm = getattr(nn, "RMSNorm", RMSNormFallback)  # torch >= 2.4 has its own


def mlp_layer(kind: str, d_model: int, d_ff: int) -> nn.Module:
    """The feed-forward named by ``Shape.mlp`` (records.MLPS)."""
    if kind == "gelu":  # d -> d_ff -> d (Vaswani et al. 2017; GELU as in GPT-2), laid out as before issue 24
        return nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
    if kind == "swiglu":
        return SwiGLU(d_model, d_ff)
    raise ValueError(f"unknown mlp {kind!r}")  # Shape refuses it first, in one line


def norm_layer(kind: str, d_model: int) -> nn.Module:
    """The norm named by ``Shape.norm`` (records.NORMS)."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model)
    if kind == "rmsnorm":
        return RMSNorm(d_model, eps=RMS_EPS)
    raise ValueError(f"unknown norm {kind!r}")  # Shape refuses it first, in one line
