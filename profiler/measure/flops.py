"""FLOP counting with torch's per-op formulas, in a dispatch mode of our own.

Why not ``FlopCounterMode`` itself: its module tracker keeps tensors alive, which
changes the memory peak it runs beside (measured: +31% for checkpointed SDPA at n=512).
This mode only reads shapes.

Every SDPA backend op (CPU flash, which torch's registry counts as 0; CUDA's flash,
memory-efficient and cuDNN ops, which torch 2.11 cannot count with grouped KV heads) is
counted by flops_sdpa.py: torch's own formulas, halved when causal because the fused
kernels skip fully masked blocks (FlashAttention-2, Dao 2023, §3.1). Materialised
(einsum) attention and SDPA's math backend are counted as the matmuls they run: causal
or not, every score.
"""

from __future__ import annotations

from torch.utils import flop_counter as fc
from torch.utils._python_dispatch import TorchDispatchMode

from attnprof.profiler.measure.flops_sdpa import SDPA_FORMULAS

# torch's formulas (matmuls, convolutions), every SDPA op's replaced by ours (flops_sdpa.py)
REGISTRY = {**fc.flop_registry, **SDPA_FORMULAS}


class FlopCounter(TorchDispatchMode):
    """Adds up the FLOPs of every op torch has a formula for (matmuls, attention, conv)."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = REGISTRY.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out
