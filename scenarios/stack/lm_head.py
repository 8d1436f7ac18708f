"""The two ends of a causal language model around the stack: a token embedding below it,
an LM head and the cross-entropy loss above it (scope model, ``Shape.vocab`` > 0).

Why: at long context the logits and their gradient are often the largest tensors of a
training step: fp32 (B, n, V), e.g. 64K tokens x a 128K vocabulary = 32 GiB each. A
stack-only profile misses them.

The loss is computed as a causal LM computes it (Hugging Face transformers'
``ForCausalLMLoss``, Radford et al. 2018's next-token objective): the logits upcast to
fp32 (a float64 model keeps float64), the targets shifted by one (position t predicts token t+1; the last position has no
target, ``IGNORE_INDEX``), ``F.cross_entropy`` averaged over the positions that have one.
Shifting the targets rather than the logits keeps the logits whole: no (B, n-1, V) copy.

``loss_chunks`` = C > 1 computes head + loss in C sequence chunks, each under
``torch.utils.checkpoint``: the forward keeps only each chunk's input (a view of the final
norm's output) and its loss, and backward recomputes one chunk's logits at a time, so only
about 1/C of the logits (and of their gradient) is ever alive. The standard remedy, as the
Reformer's chunked feed-forward is for the MLP (Kitaev et al. 2020, arXiv 2001.04451, §3,
"Chunking"); in practice Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024,
arXiv 2410.10989) and Unsloth's chunked cross-entropy. Exact: the chunks' summed losses
divided by the count of targets is the dense mean (tests/scenarios/stack/test_lm_head.py).

``tie_embeddings``: the head's weight *is* the embedding's (Press & Wolf 2017, arXiv
1608.05859): one parameter, its gradient the sum of both uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100  # the target of a position without a next token (torch's default ignore_index)


class LanguageModelEnds(nn.Module):
    """``embed`` (V, d) and ``head`` (d -> V, no bias; its weight is ``embed.weight`` when tied).

    Registered in the stack after the blocks and the final norm, so the stack's
    parameters still begin with the blocks' (profiler/measure/drive.py's period marks);
    a tied head adds no parameter."""

    def __init__(self, d_model: int, vocab: int, tie: bool = False, chunks: int = 1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        if tie:
            self.head.weight = self.embed.weight  # (V, d): one parameter, two uses
        self.chunks = chunks

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The causal-LM loss of the final norm's output ``hidden`` (B, n, d) and the token
        ids ``targets`` (B, n) (targets[:, t] is the token at t: position t predicts t+1)."""
        return causal_lm_loss(self.head, hidden, targets, self.chunks)


def token_batch(batch: int, seq_len: int, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random input ids and target ids, each (B, n) int64, neither requiring a gradient."""
    ids = torch.randint(vocab, (batch, seq_len), device=device)  # (B, n)
    targets = torch.randint(vocab, (batch, seq_len), device=device)  # (B, n)
    return ids, targets


def shifted(targets: torch.Tensor) -> torch.Tensor:
    """(B, n) -> (B, n): position t's target is token t+1; the last position's is IGNORE_INDEX."""
    return F.pad(targets[:, 1:], (0, 1), value=IGNORE_INDEX)  # (B, n)


def _chunk_loss_sum(head: nn.Module, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of one span: logits (B, m, V), upcast to fp32 as a causal LM does."""
    logits = head(hidden)  # (B, m, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp16/bf16 -> fp32; fp32, fp64 kept
    return F.cross_entropy(logits.flatten(0, 1), next_ids.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


def causal_lm_loss(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunks: int = 1) -> torch.Tensor:
    """Mean next-token cross-entropy of ``head(hidden)``, in ``chunks`` sequence chunks."""
    next_ids = shifted(targets)  # (B, n)
    count = max(1, targets.shape[0] * (targets.shape[1] - 1))  # positions with a next token
    if chunks == 1 or not torch.is_grad_enabled():  # nothing is saved without a gradient: no recompute needed
        return _chunk_loss_sum(head, hidden, next_ids) / count
    total = None
    for part, ids in zip(hidden.chunk(chunks, dim=1), next_ids.chunk(chunks, dim=1)):  # (B, m, d), (B, m)
        piece = checkpoint(_chunk_loss_sum, head, part, ids, use_reentrant=False)
        total = piece if total is None else total + piece
    return total / count
