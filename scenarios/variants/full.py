"""Full multi-head attention, written with einsum so the n x n scores really exist.

Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, §3.2.
At n = 65536 one head's fp32 scores alone take 16 GiB (Kitaev et al. 2020, §1).
``dropout=p`` drops attention weights while training (Vaswani et al. 2017, §5.4, as BERT
and GPT-2 train): F.dropout, whose mask and dropped weights torch allocates (traced).
"""

import torch
import torch.nn.functional as F

from attnprof.scenarios.variants.base import DROPOUT, Attention, causal_mask, mask_value
from attnprof.scenarios.variants.registry import register_variant


@register_variant("full")
class FullAttention(Attention):
    description = "exact softmax(QK^T/sqrt(d))V with the n x n scores materialised (quadratic memory)"
    paper = "Vaswani et al. 2017, Attention Is All You Need, arXiv 1706.03762"
    complexity = (2.0, 2.0)
    OPTIONS = {**Attention.OPTIONS, "dropout": DROPOUT}

    def drop(self, weights: torch.Tensor) -> torch.Tensor:
        """Attention dropout on (B, h, n, n) weights while training; the same tensor when off."""
        if not self.dropout or not self.training:
            return weights
        return F.dropout(weights, self.dropout, training=True)  # (B, h, n, n)

    def masked(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, h, n, n) -> the same with future keys masked (when causal).

        Out of place on purpose: ``masked_fill_`` on the einsum's output (a view of its
        bmm result) makes autograd rebuild that base in backward (a ``new_empty_strided``
        and a ``clone``), one more n x n gradient alive at the peak (4 instead of 3;
        B1 H8 d64 n=4096 fp32: 2104 MiB against 1592 MiB, ../shared/NOTES.md). The
        out-of-place fill saves only the bool mask for its backward."""
        if not self.causal:
            return logits
        n_q, n_k = logits.shape[-2:]
        return logits.masked_fill(causal_mask(n_q, n_k, logits.device), mask_value(logits.dtype))

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, h, n, dh) x2 -> masked logits (B, h, n, n)."""
        return self.masked(torch.einsum("bhid,bhjd->bhij", q * self.scale, k))  # (B, h, n, n)

    def core(self, q, k, v):
        attn = self.drop(self.scores(q, k).softmax(dim=-1))  # (B, h, n, n)
        return torch.einsum("bhij,bhjd->bhid", attn, v)  # (B, h, n, dh)
