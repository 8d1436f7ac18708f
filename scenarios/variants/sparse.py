"""Sparse Transformer strided and fixed attention, computed block-wise in O(n·√n) memory.

Child et al. 2019, "Generating Long Sequences with Sparse Transformers", arXiv 1904.10509,
§4.2 (the index sets A¹, A², defined in ``sparse_patterns``) and §4.3 (three ways to combine
them: one head over A¹ ∪ A², half the heads each, or alternating residual blocks).
No n x n tensor exists: per head, strided holds n·2l (band) and n·n/l (columns) scores,
fixed n·l (blocks) and n·(n/l)·c (summaries); with l ≈ √n all are O(n·√n). Each mask is
built from index vectors of its part's size. All shapes are static (FakeTensorMode runs it).

Fixed attention shares one summary sub-block (the last c of each block) across heads by
default; ``distinct_summaries=true`` gives each head attending A² its own sub-block, as §4.2
found preferable (``sparse_patterns.summary_start`` states the assignment). ``cost_flops`` and
``cost_bytes`` give the report its expected exponents (docs/variants.md lists every departure
from the paper).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnprof.scenarios.variants.base import (Attention, Option, VariantError, mask_value, positive,
                                               power_of_two)
from attnprof.scenarios.variants.sparse_patterns import (default_stride, fixed_a1, fixed_a2, strided_a1,
                                                          strided_a2, summary_start)
from attnprof.scenarios.variants.registry import register_variant

COMBINES = ("merged", "multihead", "interleaved")


def _combine_check(value):
    return None if value in COMBINES else "must be one of " + ", ".join(COMBINES)


def _attend(q, k, v, allowed, scale, with_lse=True):
    """Softmax attention of q (..., m, dh) over k, v (..., w, dh) where ``allowed`` (bool,
    broadcast to (..., m, w)) holds. Returns out (..., m, dh), zero on a row that allows no
    key, and the rows' logsumexp (..., m), about mask_value on such a row (None unless
    ``with_lse``: logsumexp costs one more scores-sized tensor at the peak)."""
    logits = torch.matmul(q * scale, k.transpose(-1, -2))  # (..., m, w)
    # A finite mask value: a fully masked row gets a finite lse and no NaN (base.mask_value).
    logits = logits.masked_fill(~allowed, mask_value(logits.dtype))
    out = torch.matmul(logits.softmax(dim=-1), v)  # (..., m, dh)
    return out * allowed.any(dim=-1, keepdim=True), (logits.logsumexp(dim=-1) if with_lse else None)


class _SparseAttention(Attention):
    """What strided and fixed share: options, shape checks and the §4.3 combinations.
    A subclass supplies the two predicates and ``part1``/``part2``, each computing one
    set's attention block-wise for a given predicate ``allowed(i, j)``."""

    complexity = (1.5, 1.5)  # with l ~ sqrt(n); the report fits cost_flops / cost_bytes at the measured lengths
    paper = "Child et al. 2019, Generating Long Sequences with Sparse Transformers, arXiv 1904.10509"
    OPTIONS = {
        **Attention.OPTIONS,
        "stride": Option(int, None, "l; default the power of two nearest sqrt(n)", check=power_of_two),
        "combine": Option(str, "merged", "merged (one head, A1 u A2), multihead (half the heads each) "
                          "or interleaved (A1 in even layers, A2 in odd)", check=_combine_check),
    }

    @staticmethod
    def stride_for(options: dict, seq_len: int) -> int:
        return options["stride"] or default_stride(seq_len)

    @classmethod
    def layer_period(cls, options: dict) -> int:
        return 2 if options.get("combine") == "interleaved" else 1  # A1 / A2 alternate by block

    # --- cost formulas (reports/scaling.py fits them at the measured lengths) ---------------
    # Bytes per element at the forward+backward peak of ``core``, fitted (to within 14%) on the
    # exact tracked peaks of 72 shapes per pattern (n 1K-16K, l default and 32, dh 32 and 64,
    # causal and not, fp32): (per A¹ score, per A² score, per q/k/v row element, per band
    # window row element). A¹ and A² run one after the other, so the weights differ by combine.
    MEMORY_FIT: dict = {}

    @classmethod
    def entries(cls, options: dict, seq_len: int) -> tuple:
        """Score entries per head of the A¹ and the A² part, masked ones included."""
        raise NotImplementedError

    @classmethod
    def head_shares(cls, options: dict, heads: int) -> tuple:
        """How many heads compute A¹ and A² in the core at layer 0 (scope attention)."""
        return {"merged": (heads, heads), "multihead": (heads / 2, heads / 2),
                "interleaved": (heads, 0)}[options["combine"]]

    @classmethod
    def cost_flops(cls, options: dict, seq_len: int, heads: int, head_dim: int, forward_only: bool = False) -> float:
        """Matmul FLOPs of ``core`` per batch row: two matmuls of 2 * entries * dh forward per
        part, twice that backward."""
        (e1, e2), (h1, h2) = cls.entries(options, seq_len), cls.head_shares(options, heads)
        return float((h1 * e1 + h2 * e2) * 4 * head_dim * (1 if forward_only else 3))

    @classmethod
    def cost_bytes(cls, options: dict, seq_len: int, heads: int, head_dim: int, dtype_bytes: int = 4) -> float:
        """Peak bytes of ``core`` forward + backward per batch row: MEMORY_FIT's weights on the
        score entries and the row elements (n * dh per head; the band's windows span * n * dh)."""
        e1, e2 = cls.entries(options, seq_len)
        s1, s2, rows, window = cls.MEMORY_FIT[options["combine"]]
        span = 2 if options["causal"] else 3
        return float(dtype_bytes * heads * (s1 * e1 + s2 * e2 + (rows + window * span) * seq_len * head_dim))

    @classmethod
    def check_shape(cls, options, seq_len, heads, head_dim):
        l = cls.stride_for(options, seq_len)
        if seq_len % l:
            fits = seq_len & -seq_len  # the largest power of two dividing seq_len
            raise VariantError(f"{cls.name}: seq_len {seq_len} is not a multiple of stride {l}; "
                               f"use a multiple of {l} or stride={fits}")
        if options["combine"] == "multihead" and heads % 2:
            raise VariantError(f"{cls.name}: combine=multihead splits heads in two halves; "
                               f"heads {heads} is odd, use an even number")

    def predicates(self, l: int):
        """(A¹, A²) as predicates allowed(i, j, g=0) on broadcast position tensors; g is the
        index of the head among those attending A² (fixed attention's distinct summaries)."""
        raise NotImplementedError

    def core(self, q, k, v):
        b, h, n, dh = q.shape
        self.check_shape(self.options, n, h, dh)
        l = self.stride_for(self.options, n)
        a1, a2 = self.predicates(l)
        if self.combine == "multihead":  # first half of the heads on A¹, second half on A²
            half = h // 2
            o1, _ = self.part1(q[:, :half], k[:, :half], v[:, :half], l, a1)  # (B, h/2, n, dh)
            o2, _ = self.part2(q[:, half:], k[:, half:], v[:, half:], l, a2)  # (B, h/2, n, dh)
            return torch.cat([o1, o2], dim=1)  # (B, h, n, dh)
        if self.combine == "interleaved":  # residual block r uses A^(r mod 2 + 1)
            part, pred = (self.part1, a1) if self.layer_index % 2 == 0 else (self.part2, a2)
            return part(q, k, v, l, pred)[0]
        # merged: one softmax over A¹ ∪ A²; A² drops keys A¹ already has, so each counts once.
        o1, lse1 = self.part1(q, k, v, l, a1)  # (B, h, n, dh), (B, h, n)
        o2, lse2 = self.part2(q, k, v, l, lambda i, j, g=0: a2(i, j, g) & ~a1(i, j))
        lse = torch.logaddexp(lse1, lse2)  # (B, h, n): the union's normaliser
        return o1 * (lse1 - lse).exp().unsqueeze(-1) + o2 * (lse2 - lse).exp().unsqueeze(-1)


def _blocks(t, l):
    """(B, h, n, dh) -> (B, h, n/l, l, dh), a view."""
    b, h, n, dh = t.shape
    return t.view(b, h, n // l, l, dh)  # (B, h, n/l, l, dh)


def band_attend(q, k, v, block, causal, allowed, scale, with_lse=True, reach=1):
    """Attention of q over a band of keys, block-wise: q, k, v (B, h, n, dh); query block b
    (``block`` queries) sees key blocks b−reach … b (… b+reach when not causal), masked within
    by ``allowed(i, j)`` on broadcast positions, so a band no wider than reach·block each way
    is exact. Scores: (n/block)·block·span·block per head, span = reach+1 (2·reach+1 when not
    causal), never n x n unless one block is all of n. An n that is not a multiple of ``block``
    is padded at the end (padded keys masked, padded rows dropped). Returns out (B, h, n, dh)
    and the rows' logsumexp (B, h, n) or None, as ``_attend``. Shared by strided A¹ (block = l,
    reach 1) and ``sliding_window`` (block = the window, reach 1; reach 0 when n ≤ W)."""
    b, h, n, dh = q.shape
    nb = -(-n // block)  # query blocks
    span = (1 if causal else 2) * reach + 1  # key blocks per query block
    tail = nb * block - n  # padding at the end: 0 when block divides n (strided always)
    pos = torch.arange(nb * block, device=q.device).view(nb, block)  # (n/block, block)
    # reach zero blocks before, and after if bidirectional
    pad = (0, 0, reach * block, (span - 1 - reach) * block + tail)
    if tail:
        q = F.pad(q, (0, 0, 0, tail))  # (B, h, nb·block, dh)

    def windows(t):
        if span == 1 and not any(pad):
            return _blocks(t, block)  # (B, h, n/block, block, dh): the own block only, a view
        tb = _blocks(F.pad(t, pad), block)  # (B, h, n/block + span − 1, block, dh)
        return torch.cat([tb[:, :, s:s + nb] for s in range(span)], dim=3)  # (B, h, n/block, span·block, dh)

    kpos = torch.cat([pos + (s - reach) * block for s in range(span)], dim=1)  # (n/block, span·block)
    inside = ((kpos >= 0) & (kpos < n))[:, None, :]  # (n/block, 1, span·block): not a padding key
    ok = allowed(pos[:, :, None], kpos[:, None, :]) & inside  # (n/block, block, span·block)
    # out (B, h, n/block, block, dh), lse (B, h, n/block, block)
    out, lse = _attend(_blocks(q, block), windows(k), windows(v), ok, scale, with_lse)
    out = out.reshape(b, h, nb * block, dh)  # (B, h, nb·block, dh)
    lse = None if lse is None else lse.reshape(b, h, nb * block)  # (B, h, nb·block)
    if tail:
        out, lse = out[:, :, :n], (None if lse is None else lse[:, :, :n])  # (B, h, n, dh), (B, h, n)
    return out, lse


@register_variant("sparse_strided")
class StridedSparseAttention(_SparseAttention):
    description = "Sparse Transformer strided: band of l plus every l-th key, l ~ sqrt(n) (n sqrt n memory)"
    MEMORY_FIT = {"merged": (3.2, 5.1, 4.8, 3.9), "multihead": (1.7, 1.9, 6.7, 1.3),
                  "interleaved": (3.8, 0.0, 4.5, 2.7)}

    @classmethod
    def entries(cls, options, seq_len):
        l, span = cls.stride_for(options, seq_len), (2 if options["causal"] else 3)
        return seq_len * span * l, seq_len * (seq_len // l)  # band blocks; l columns of (n/l)^2

    def predicates(self, l):
        causal = self.causal
        return (lambda i, j, g=0: strided_a1(i, j, l, causal)), (lambda i, j, g=0: strided_a2(i, j, l, causal))

    def part1(self, q, k, v, l, allowed):
        """The band |i−j| ≤ l: query block b sees key blocks b−1, b (and b+1 bidirectional)."""
        return band_attend(q, k, v, l, self.causal, allowed, self.scale)

    def part2(self, q, k, v, l, allowed):
        """Every l-th key: query i = b·l + r sees column r, i.e. keys b'·l + r."""
        b, h, n, dh = q.shape

        def columns(t):
            return _blocks(t, l).transpose(2, 3)  # (B, h, l, n/l, dh)

        pos = torch.arange(n, device=q.device).view(n // l, l).t()  # (l, n/l): column r, row b
        ok = allowed(pos[:, :, None], pos[:, None, :])  # (l, n/l, n/l)
        # out (B, h, l, n/l, dh), lse (B, h, l, n/l)
        out, lse = _attend(columns(q), columns(k), columns(v), ok, self.scale)
        return out.transpose(2, 3).reshape(b, h, n, dh), lse.transpose(2, 3).reshape(b, h, n)


@register_variant("sparse_fixed")
class FixedSparseAttention(_SparseAttention):
    description = "Sparse Transformer fixed: own block of l plus the last c keys of each block (n sqrt n memory)"
    OPTIONS = {
        **_SparseAttention.OPTIONS,
        # The paper found c ∈ {8, 16, 32} worked well (§4.2).
        "summary": Option(int, 8, "c, the summary keys at the end of each block; c <= stride", check=positive),
        "distinct_summaries": Option(bool, False, "paper §4.2: the g-th head on A2 attends the g-th sub-block of c "
                                     "from each block's end (offsets l-c(g mod l/c + 1) ...); false: every head "
                                     "the last c"),
    }

    MEMORY_FIT = {"merged": (2.0, 5.1, 9.4, 0.0), "multihead": (1.1, 2.1, 6.2, 0.0),
                  "interleaved": (3.8, 0.0, 7.9, 0.0)}

    @classmethod
    def entries(cls, options, seq_len):
        l = cls.stride_for(options, seq_len)
        return seq_len * l, seq_len * (seq_len // l) * options["summary"]  # own blocks; c per block for all

    @classmethod
    def check_shape(cls, options, seq_len, heads, head_dim):
        l, c = cls.stride_for(options, seq_len), options["summary"]
        if c > l:
            raise VariantError(f"{cls.name}: summary {c} exceeds stride {l}; "
                               f"use summary <= {l} or stride >= {c}")
        super().check_shape(options, seq_len, heads, head_dim)

    def predicates(self, l):
        c, causal, distinct = self.options["summary"], self.causal, self.options["distinct_summaries"]
        return ((lambda i, j, g=0: fixed_a1(i, j, l, c, causal)),
                (lambda i, j, g=0: fixed_a2(i, j, l, c, causal, g if distinct else 0)))

    def part1(self, q, k, v, l, allowed):
        """The own block: block-diagonal attention."""
        b, h, n, dh = q.shape
        pos = torch.arange(n, device=q.device).view(n // l, l)  # (n/l, l)
        ok = allowed(pos[:, :, None], pos[:, None, :])  # (n/l, l, l)
        qb, kb, vb = _blocks(q, l), _blocks(k, l), _blocks(v, l)  # (B, h, n/l, l, dh)
        out, lse = _attend(qb, kb, vb, ok, self.scale)  # out (B, h, n/l, l, dh), lse (B, h, n/l, l)
        return out.reshape(b, h, n, dh), lse.reshape(b, h, n)

    def part2(self, q, k, v, l, allowed):
        """The summary keys: c of every block (the last c, or each head its own sub-block),
        gathered, seen by all queries."""
        b, h, n, dh = q.shape
        c = self.options["summary"]
        pos = torch.arange(n, device=q.device)  # (n,)
        if not self.options["distinct_summaries"]:
            def summaries(t):
                return _blocks(t, l)[:, :, :, l - c:].reshape(b, h, (n // l) * c, dh)  # (B, h, (n/l)·c, dh)

            kpos = pos.view(n // l, l)[:, l - c:].reshape(-1)  # ((n/l)·c,)
            ok = allowed(pos[:, None], kpos[None, :])  # (n, (n/l)·c)
            return _attend(q, summaries(k), summaries(v), ok, self.scale)  # (B, h, n, dh), (B, h, n)
        group = torch.arange(h, device=q.device)  # (h,): these heads' index among the A² heads
        start = summary_start(l, c, group)  # (h,)
        offsets = start.view(h, 1, 1) + torch.arange(c, device=q.device).view(1, 1, c)  # (h, 1, c)
        kpos = (torch.arange(n // l, device=q.device).view(1, n // l, 1) * l + offsets).reshape(h, -1)  # (h, (n/l)·c)
        index = kpos.view(1, h, -1, 1).expand(b, h, kpos.shape[-1], dh)  # (B, h, (n/l)·c, dh)
        ok = allowed(pos.view(1, n, 1), kpos.view(h, 1, -1), group.view(h, 1, 1))  # (h, n, (n/l)·c)
        return _attend(q, k.gather(2, index), v.gather(2, index), ok, self.scale)  # (B, h, n, dh), (B, h, n)
