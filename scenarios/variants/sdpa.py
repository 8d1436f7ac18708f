"""PyTorch's fused scaled_dot_product_attention: the modern exact baseline.

No explicit mask is passed (``is_causal`` instead), so the flash / memory-efficient
kernels apply and memory stays linear in n (Dao et al. 2022, arXiv 2205.14135).

Grouped KV heads (issue 24): k and v keep their K heads and SDPA is called with
``enable_gqa=True`` where the running torch takes it (torch >= 2.5: read from the
function's signature, else its version); elsewhere ``base.attend`` repeats them first
(Llama's ``repeat_kv``). ``kv_repeat`` says which, and the record keeps it.
``dropout=p`` is SDPA's ``dropout_p`` while training (on CPU torch then runs the math
path, quadratic: traced, not assumed).
"""

import inspect

import torch
import torch.nn.functional as F

from attnprof.scenarios.variants.base import DROPOUT, Attention
from attnprof.scenarios.variants.registry import register_variant


def _takes_enable_gqa() -> bool:
    """Whether this torch's F.scaled_dot_product_attention has ``enable_gqa`` (added in 2.5):
    its signature where Python can read one (a builtin has none), else its version."""
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):
        pass
    try:
        major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 5)


HAS_ENABLE_GQA = _takes_enable_gqa()


@register_variant("sdpa")
class SDPAttention(Attention):
    description = "torch scaled_dot_product_attention, fused kernels, no explicit mask (linear memory)"
    paper = "Vaswani et al. 2017 (arXiv 1706.03762) via fused kernels; Dao et al. 2022 (arXiv 2205.14135)"
    complexity = (1.0, 2.0)
    OPTIONS = {**Attention.OPTIONS, "dropout": DROPOUT}
    native_gqa = HAS_ENABLE_GQA  # k, v with K heads go to SDPA as they are

    @classmethod
    def kv_repeat(cls, heads: int, kv_heads: int) -> str:
        if not kv_heads or kv_heads == heads:
            return ""
        return "enable_gqa" if cls.native_gqa else "repeat"

    def core(self, q, k, v):
        extra = {}
        if k.shape[1] != q.shape[1]:  # only when heads differ: the default call stays as it was
            extra["enable_gqa"] = True
        if self.dropout and self.training:
            extra["dropout_p"] = self.dropout
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, **extra)  # (B, h, n, dh)
