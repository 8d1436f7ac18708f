"""Sliding-window (local) attention, block-wise in O(n·W) memory: each query sees the last W keys.

Beltagy et al. 2020, "Longformer: The Long-Document Transformer", arXiv 2004.05150, §3.1
(sliding window); Jiang et al. 2023, "Mistral 7B", arXiv 2310.06825, §2 (sliding window
attention, W = 4096). The window convention (``sparse_patterns.sliding_window``): causal,
query i attends keys max(0, i−W+1) … i, W keys counting itself. That is the mask Hugging
Face transformers applies for a config's ``sliding_window`` (masking_utils.sliding_window_overlay:
kv_idx > q_idx − sliding_window), so a Mistral config.json's W means the same here; the
paper's prose says "between i − W and i", one key more.
Bidirectional (``causal=false``): |i − j| ≤ W − 1, W − 1 keys on each side, so Longformer's
window w (w/2 on each side, §3.1) is W = w/2 + 1 here.

It is the Sparse Transformer's A¹ band (Child et al. 2019, arXiv 1904.10509, §4.2) with
l = W − 1, and runs on the same code: ``sparse.band_attend`` with blocks of W queries, each
seeing its own key block and the previous one (and the next, bidirectional), masked inside
that (W x 2W) band; n is padded at the end to a multiple of W. Scores per head: 2·n·W
(3·n·W bidirectional), never n x n, not even as a mask. For n ≤ W the window covers every
key and one block of n, with no neighbour block, is ordinary causal attention (n x n scores:
all of them are in the window).
"""

from __future__ import annotations

from attnprof.scenarios.variants.base import Attention, Option, positive
from attnprof.scenarios.variants.registry import register_variant
from attnprof.scenarios.variants.sparse import band_attend
from attnprof.scenarios.variants.sparse_patterns import sliding_window


@register_variant("sliding_window")
class SlidingWindowAttention(Attention):
    description = "local attention over the last W keys (Longformer, Mistral), block-wise (n W memory)"
    paper = ("Beltagy et al. 2020, Longformer, arXiv 2004.05150; "
             "Jiang et al. 2023, Mistral 7B, arXiv 2310.06825")
    complexity = (1.0, 1.0)  # at a fixed window W and n >> W
    OPTIONS = {
        **Attention.OPTIONS,
        # 256: a window the default sweep lengths (256 and up) outgrow, so the linear regime
        # shows; Mistral 7B uses 4096, Longformer 512 (= 256 each side, W = 257 here).
        "window": Option(int, 256, "W, keys a query sees counting itself: max(0, i-W+1)..i; "
                         "bidirectional |i-j| <= W-1", check=positive),
    }

    @staticmethod
    def blocks_for(options: dict, seq_len: int) -> tuple:
        """(queries per block, neighbour blocks each way): (W, 1), or (n, 0) when the window
        covers the whole sequence (n ≤ W: one block, nothing beside it)."""
        w = options["window"]
        return (w, 1) if seq_len > w else (max(1, seq_len), 0)

    @classmethod
    def entries(cls, options: dict, seq_len: int) -> int:
        """Score entries per head, masked ones included: padded rows x span blocks of keys."""
        block, reach = cls.blocks_for(options, seq_len)
        rows = -(-seq_len // block) * block  # n padded to a multiple of the block
        return rows * ((1 if options["causal"] else 2) * reach + 1) * block

    @classmethod
    def cost_flops(cls, options: dict, seq_len: int, heads: int, head_dim: int, forward_only: bool = False) -> float:
        """Matmul FLOPs of ``core`` per batch row: QKᵀ and PV, 2·entries·dh each forward;
        backward twice that."""
        return float(heads * cls.entries(options, seq_len) * 4 * head_dim * (1 if forward_only else 3))

    # Bytes per element at the forward+backward peak of ``core``, fitted (to within 12%) on the
    # exact tracked peaks of 36 shapes (n 512-8K, W 64-1024, dh 32 and 64, causal and not, fp32):
    # (per score entry, per q/k/v row element).
    MEMORY_FIT = (3.0, 11.2)

    @classmethod
    def cost_bytes(cls, options: dict, seq_len: int, heads: int, head_dim: int, dtype_bytes: int = 4) -> float:
        """Peak bytes of ``core`` forward + backward per batch row: MEMORY_FIT's weights on the
        score entries and the n·dh row elements per head. Linear in n beyond W, quadratic below
        (one block of n): what the report's expected exponent should show at short lengths."""
        scores, rows = cls.MEMORY_FIT
        return float(dtype_bytes * heads * (scores * cls.entries(options, seq_len) + rows * seq_len * head_dim))

    def core(self, q, k, v):
        w, causal = self.window, self.causal
        block, reach = self.blocks_for(self.options, q.shape[2])
        # One softmax over the band: its logsumexp (the sparse merge's normaliser) is not needed.
        out, _ = band_attend(q, k, v, block, causal, lambda i, j: sliding_window(i, j, w, causal), self.scale,
                             with_lse=False, reach=reach)
        return out  # (B, h, n, dh)
