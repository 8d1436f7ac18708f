"""The transformer stack attnprof profiles at scope ``model``, in three modes.

- ``plain``: ordinary pre-norm residual blocks (Vaswani et al. 2017, pre-norm as in GPT-2).
- ``checkpoint``: each block recomputed in backward (Child et al. 2019, §5.4), via
  ``torch.utils.checkpoint`` with ``use_reentrant=False`` (RNG state is preserved).
- ``reversible``: RevNet coupling, activations independent of depth (Kitaev et al. 2020, §3).

Each block's feed-forward and every norm (both pre-norms and the final one) are chosen
by the shape: ``mlp`` gelu | swiglu at width ``d_ff``, ``norm`` layernorm | rmsnorm
(``layers.py``: SwiGLU, Shazeer 2020; RMSNorm, Zhang & Sennrich 2019). The modes treat
them as any f and g: checkpoint recomputes them, reversible rebuilds their inputs.

Without a vocabulary (``Shape.vocab`` = 0, the default) there is no embedding and no output
head: x [batch, seq, d_model] comes in with
requires_grad, and the profiled backward starts from a fixed random upstream gradient
of the output (``profiler/measure/workload.py``), i.e. the loss (out * proj).sum() with a
seeded [batch, seq, d_model] projection. (A plain out.sum() would be degenerate: after
the final LayerNorm at default weights its input gradient is zero by construction.)
With a vocabulary, token ids [batch, seq] come in, a token embedding runs first and
``lm`` holds the LM head and the loss the workload computes (``lm_head.py``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from attnprof.scenarios.variants.registry import VariantSpec
from attnprof.scenarios.stack.layers import mlp_layer, norm_layer
from attnprof.scenarios.stack.reversible import reversible_stack
from attnprof.scenarios.stack.lm_head import LanguageModelEnds
from attnprof.profiler.records import MODES, SCOPES, Shape  # noqa: F401 (re-exported)

# The reversible network computed with ordinary autograd: same function as `reversible`,
# every activation stored. Not a profiled mode; the gradient reference for `reversible`.
REVERSIBLE_REFERENCE = "reversible-autograd"


class FeedForward(nn.Module):
    """Position-wise MLP (``mlp``: GELU or SwiGLU), d -> d_ff -> d; in ``chunks`` along the
    sequence (Reformer §3)."""

    def __init__(self, d_model: int, d_ff: int, chunks: int, mlp: str = "gelu"):
        super().__init__()
        self.chunks = chunks
        self.net = mlp_layer(mlp, d_model, d_ff)

    def forward(self, x):  # (B, n, d)
        if self.chunks == 1:
            return self.net(x)
        return torch.cat([self.net(part) for part in x.chunk(self.chunks, dim=1)], dim=1)  # (B, n, d)


class PreNorm(nn.Module):
    def __init__(self, d_model: int, fn: nn.Module, norm: str = "layernorm"):
        super().__init__()
        self.norm, self.fn = norm_layer(norm, d_model), fn

    def forward(self, x):
        return self.fn(self.norm(x))


class Block(nn.Module):
    """One transformer block: f = attention, g = feed-forward, both pre-normed."""

    def __init__(self, spec: VariantSpec, shape: Shape, layer_index: int):
        super().__init__()
        self.f = PreNorm(shape.d_model, spec.build(shape.d_model, shape.heads, layer_index=layer_index,
                                                   kv_heads=shape.kv_heads, rope=shape.rope), shape.norm)
        self.g = PreNorm(shape.d_model, FeedForward(shape.d_model, shape.d_ff, shape.ff_chunks, shape.mlp), shape.norm)

    def forward(self, x):
        x = x + self.f(x)
        return x + self.g(x)


class Stack(nn.Module):
    """L blocks of one attention variant, run in one of MODES."""

    def __init__(self, spec: VariantSpec, shape: Shape, mode: str = "plain"):
        super().__init__()
        if mode not in MODES + (REVERSIBLE_REFERENCE,):
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        self.mode = mode
        self.blocks = nn.ModuleList(Block(spec, shape, i) for i in range(shape.layers))
        self.norm = norm_layer(shape.norm, shape.d_model)
        # issue 24: lm. Registered last: the parameters begin with the blocks' (drive.Marks)
        self.lm = (LanguageModelEnds(shape.d_model, shape.vocab, shape.tie_embeddings, shape.loss_chunks)
                   if shape.vocab else None)

    def forward(self, x):  # (B, n, d) -> (B, n, d); with a vocabulary, ids (B, n) -> (B, n, d)
        if self.lm is not None:
            x = self.lm.embed(x)  # (B, n) -> (B, n, d)
        if self.mode in ("reversible", REVERSIBLE_REFERENCE):
            x = reversible_stack(x, self.blocks, memory_saving=self.mode == "reversible")
        else:
            for block in self.blocks:
                if self.mode == "checkpoint":
                    x = checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
        return self.norm(x)
