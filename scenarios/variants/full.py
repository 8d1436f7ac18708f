"""Full multi-head attention, written with einsum so the n x n scores really exist.

Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, §3.2.
At n = 65536 one head's fp32 scores alone take 16 GiB (Kitaev et al. 2020, §1).
"""

import torch

from attnprof.scenarios.variants.base import Attention, causal_mask, mask_value
from attnprof.scenarios.variants.registry import register_variant


@register_variant("full")
class FullAttention(Attention):
    description = "exact softmax(QK^T/sqrt(d))V with the n x n scores materialised (quadratic memory)"
    paper = "Vaswani et al. 2017, Attention Is All You Need, arXiv 1706.03762"
    complexity = (2.0, 2.0)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, h, n, dh) x2 -> masked logits (B, h, n, n)."""
        logits = torch.einsum("bhid,bhjd->bhij", q * self.scale, k)  # (B, h, n, n)
        if self.causal:
            n = q.shape[-2]
            logits.masked_fill_(causal_mask(n, n, q.device), mask_value(logits.dtype))
        return logits

    def core(self, q, k, v):
        attn = self.scores(q, k).softmax(dim=-1)  # (B, h, n, n)
        return torch.einsum("bhij,bhjd->bhid", attn, v)  # (B, h, n, dh)
