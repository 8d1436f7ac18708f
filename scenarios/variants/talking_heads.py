"""Talking-Heads attention: learned h x h head mixing before and after the softmax.

Shazeer et al. 2020, "Talking-Heads Attention", arXiv 2003.02436, §4 (h_k = h = h_v here).
Grouped KV heads (issue 24): K/V are repeated to the query heads first (base.attend), and
the mixing runs over the query heads. ``dropout=p`` drops the mixed weights, the ones that
multiply V (as full attention drops its softmax output).
"""

import torch
from torch import nn

from attnprof.scenarios.variants.full import FullAttention
from attnprof.scenarios.variants.registry import register_variant


@register_variant("talking_heads")
class TalkingHeadsAttention(FullAttention):
    description = "full attention plus learned h x h head-mixing of logits and of weights (quadratic memory)"
    paper = "Shazeer et al. 2020, Talking-Heads Attention, arXiv 2003.02436"
    complexity = (2.0, 2.0)

    def __init__(self, d_model, heads, **kwargs):
        super().__init__(d_model, heads, **kwargs)
        # Identity plus noise: starts near plain multi-head attention, yet mixes from step one.
        eye = torch.eye(heads)
        self.pre_mix = nn.Parameter(eye + 0.02 * torch.randn(heads, heads))  # logits: (h, h)
        self.post_mix = nn.Parameter(eye + 0.02 * torch.randn(heads, heads))  # weights: (h, h)

    def core(self, q, k, v):
        logits = torch.einsum("bhid,bhjd->bhij", q * self.scale, k)  # (B, h, n, n)
        logits = torch.einsum("bhij,hg->bgij", logits, self.pre_mix.to(logits.dtype))  # (B, h, n, n)
        weights = self.masked(logits).softmax(dim=-1)  # (B, h, n, n); masked out of place (see masked)
        weights = torch.einsum("bhij,hg->bgij", weights, self.post_mix.to(weights.dtype))  # (B, h, n, n)
        weights = self.drop(weights)  # (B, h, n, n)
        return torch.einsum("bhij,bhjd->bhid", weights, v)  # (B, h, n, dh)
