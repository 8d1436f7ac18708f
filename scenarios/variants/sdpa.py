"""PyTorch's fused scaled_dot_product_attention: the modern exact baseline.

No explicit mask is passed (``is_causal`` instead), so the flash / memory-efficient
kernels apply and memory stays linear in n (Dao et al. 2022, arXiv 2205.14135).
"""

import torch.nn.functional as F

from attnprof.scenarios.variants.base import Attention
from attnprof.scenarios.variants.registry import register_variant


@register_variant("sdpa")
class SDPAttention(Attention):
    description = "torch scaled_dot_product_attention, fused kernels, no explicit mask (linear memory)"
    paper = "Vaswani et al. 2017 (arXiv 1706.03762) via fused kernels; Dao et al. 2022 (arXiv 2205.14135)"
    complexity = (1.0, 2.0)

    def core(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (B, h, n, dh)
