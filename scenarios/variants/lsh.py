"""Reformer LSH attention: hash the shared query-keys, sort by bucket, attend in chunks.

Kitaev, Kaiser & Levskaya 2020, "Reformer: The Efficient Transformer", arXiv 2001.04451, §2
and Appendix A. Angular LSH by random rotations buckets similar vectors together; after a
sort by (bucket, position) each chunk of ``bucket_size`` queries attends to its own chunk
and the one before it. Keys are the L2-normalised queries (shared-QK); a query's own key
is masked to -1e5. ``n_hashes`` rounds are combined by their softmax normalisers. Memory is
O(n_hashes * n * bucket_size): nothing of size n x n is ever built.

The defaults follow reformer-pytorch's ``LSHAttention`` (attend_across_buckets=True,
allow_duplicate_attention=True, look-back rolled over every round's chunks, n_buckets =
n / bucket_size). Where they depart from the paper, and the option that restores it
(docs/variants.md has the reasons):

- Keys of *other* buckets that share the window are attended. The paper masks every key
  j not in the query's bucket P_i (Eq. 3, m(j, P_i) = inf): ``bucket_mask=true``.
- A key seen in several rounds is counted once per round, so it gets up to n_hashes times
  its weight. Appendix A subtracts log N_ij from each copy (Eq. 7-8), so each key counts
  once: ``dedup=true`` (N_ij = the number of times the pair is attended over all rounds;
  the paper counts the rounds in which the pair shares a bucket, the same number whenever
  no bucket overflows its window).
- The look-back rolls over the chunks of all rounds: the first chunk of round r looks back
  into round r-1's last chunk, and chunk 0 of round 0 wraps to the very last chunk, under
  the causal mask too. The paper's window P~_i = {j : floor(s_i/m) - 1 <= floor(s_j/m) <=
  floor(s_i/m)} stays inside one round and has no wrap: ``lookback=within_round``.
- n_buckets = n / bucket_size (buckets average one chunk). The paper takes chunks of
  m = 2n / n_buckets (buckets average half a chunk): ``buckets_per_chunk=2``.
- Hashing is not free: the rotation xR costs n * n_buckets * dh multiply-adds per head and
  round, i.e. n^2 * dh * n_hashes / bucket_size, quadratic in n at a fixed bucket size
  (Table 1 of the paper leaves it out). ``cost_flops`` counts it; at 64K tokens and c = 64
  it is 40% of the forward+backward FLOPs.
- One rotation per round is shared by every head and batch row (reformer-pytorch's
  random_rotations_per_head=False), drawn afresh each forward.
"""

from contextlib import contextmanager

import torch
import torch.nn.functional as F

from attnprof.scenarios.variants.base import Attention, Option, VariantError, mask_value, positive
from attnprof.scenarios.variants.registry import register_variant

# Reformer §2 masks a query's own key (with shared QK it would always win) by -1e5, not by
# the full mask value: ignored whenever another key is visible, yet finite, so a token with
# no other key (position 0 under the causal mask) still attends to itself instead of NaN.
SELF_ATTN_VALUE = -1e5


def self_mask_value(dtype: torch.dtype) -> float:
    """-1e5 where the dtype holds it (fp16 tops out at 65504: half its minimum instead),
    always above mask_value(dtype), so the self key beats every masked key."""
    return max(SELF_ATTN_VALUE, mask_value(dtype) / 2)


def look_one_back(x: torch.Tensor) -> torch.Tensor:
    """(B, h, C, c, ...) -> (B, h, C, 2c, ...): each chunk, then the chunk before it
    (chunk 0 wraps to the last one, as in the reference implementations)."""
    return torch.cat([x, x.roll(1, dims=2)], dim=3)


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, h, n, dh), index (B, h, m) -> (B, h, m, dh) with rows x[..., index, :]."""
    return x.gather(2, index.unsqueeze(-1).expand(-1, -1, -1, x.shape[-1]))


@torch.no_grad()  # bucket ids are integers: nothing to differentiate, nothing to save
def hash_buckets(x: torch.Tensor, rotations: torch.Tensor, block: int) -> torch.Tensor:
    """x (B, h, n, dh), rotations (dh, r, nb/2) -> buckets (B, h, r, n) in [0, nb).

    Angular LSH (Reformer §2): bucket = argmax(cat[xR, -xR]). xR has n * nb/2 = n^2/(2c)
    entries per head and round, so positions are hashed ``block`` at a time (a static
    count of blocks, not a data-dependent loop).
    """
    b, h, _, dh = x.shape
    _, r, half = rotations.shape
    # every round in one batched matmul, its operand laid out once: the loop runs 7 ops per
    # block instead of einsum's 18 (a fake-tensor prediction pays per op), same tensors
    flat = rotations.reshape(1, dh, r * half).expand(b * h, dh, r * half)  # (B*h, dh, r*nb/2), a view
    parts = []
    for part in x.split(block, dim=2):  # (B, h, n_blk, dh)
        m = part.shape[2]
        rotated = torch.bmm(part.reshape(b * h, m, dh), flat)  # (B*h, n_blk, r*nb/2)
        rotated = rotated.view(b, h, m, r, half).transpose(2, 3)  # (B, h, r, n_blk, nb/2)
        parts.append(torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1))  # (B, h, r, n_blk)
    return torch.cat(parts, dim=-1)  # (B, h, r, n)


LOOKBACKS = ("across", "within_round")


def _lookback_check(value):
    return None if value in LOOKBACKS else "must be one of " + ", ".join(LOOKBACKS)


@torch.no_grad()  # counts of integers: nothing to differentiate, nothing to save
def attended_counts(undo: torch.Tensor, source: torch.Tensor, round_buckets: torch.Tensor, c: int,
                    chunks_per_round: int, within_round: bool, bucket_mask: bool,
                    dtype: torch.dtype) -> torch.Tensor:
    """N for every score entry: how many times, over all rounds, the query slot's position
    attends the key slot's position. (B, h, C, c, 2c) in ``dtype``, >= 1 wherever the
    entry itself is attended (0 on entries no round attends).

    undo (B, h, r*n): flat (round, position) -> sorted slot; source (B, h, r*n): sorted slot
    -> position; round_buckets (B, h, r, n): global bucket (round * n_buckets + bucket) of
    each (round, position). A query copy (round t) attends a key copy (round u) when the
    key's slot lies in the query's chunk or the one its window looks back to, and (with
    ``bucket_mask``) they share the global bucket. Chunk ids are global over the rounds, so
    only u = t, and with the cross-round look-back u = t - 1, can match: O(r^2 n c) work,
    one score-sized count at a time (Reformer Appendix A, Eq. 8).
    """
    b, h, rn = undo.shape
    r, n = round_buckets.shape[2], round_buckets.shape[3]
    chunks = rn // c
    every = source.unsqueeze(2).expand(b, h, r, rn)  # (B, h, r, r*n): each slot's position, once per round
    at_slot = (undo // c).view(b, h, r, n).gather(-1, every).view(b, h, r, chunks, c)  # chunk in each round
    key_chunks = torch.cat([at_slot, at_slot.roll(1, dims=3)], dim=4)  # (B, h, r, C, 2c)
    if bucket_mask:
        bq = round_buckets.gather(-1, every).view(b, h, r, chunks, c)  # (B, h, r, C, c)
        bk = torch.cat([bq, bq.roll(1, dims=3)], dim=4)  # (B, h, r, C, 2c)
    count = torch.zeros(b, h, chunks, c, 2 * c, device=undo.device, dtype=dtype)  # (B, h, C, c, 2c)
    for t in range(r):
        own = at_slot[:, :, t].unsqueeze(-1)  # (B, h, C, c, 1): the query's chunk in round t
        if within_round:  # the first chunk of a round has no look-back: -1 matches no chunk
            back = torch.where(own % chunks_per_round == 0, -1, own - 1)
        else:
            back = (own - 1) % chunks
        partners = {t} if (within_round or bucket_mask) else {t, (t - 1) % r}
        for u in sorted(partners):
            theirs = key_chunks[:, :, u].unsqueeze(-2)  # (B, h, C, 1, 2c): the key's chunk in round u
            hit = (theirs == own) | (theirs == back)  # (B, h, C, c, 2c)
            if bucket_mask:
                hit &= bq[:, :, t].unsqueeze(-1) == bk[:, :, u].unsqueeze(-2)
            count += hit
    return count


@register_variant("lsh")
class LSHAttention(Attention):
    description = "Reformer LSH attention: shared-QK, hashed into sorted chunks (linear memory)"
    paper = "Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer, arXiv 2001.04451"
    shared_qk = True
    # Asymptotic orders at a fixed bucket_size: memory linear; time quadratic, because the
    # hashing (n * n_buckets * dh) eventually dominates. The report fits cost_flops and
    # cost_bytes at the measured lengths instead (local slope ~1.1-1.3 at 4K-64K).
    complexity = (1.0, 2.0)
    OPTIONS = {
        **Attention.OPTIONS,
        "n_hashes": Option(int, 2, "hash rounds; more = closer to full attention, cost linear in it", check=positive),
        "bucket_size": Option(int, 64, "queries per chunk; each query sees 2*bucket_size keys", check=positive),
        "bucket_mask": Option(bool, False, "paper Eq. 3: attend only keys of the query's own bucket inside the "
                              "window; false (reformer-pytorch) also attends other buckets' keys there"),
        "dedup": Option(bool, False, "paper Appendix A: subtract log(times a key is attended over the rounds) so "
                        "each key counts once; false (reformer-pytorch) counts it once per round"),
        "lookback": Option(str, "across", "across (reformer-pytorch: look-back crosses round boundaries, chunk 0 "
                           "wraps to the last chunk) or within_round (paper: no look-back out of a round's first "
                           "chunk)", check=_lookback_check),
        "buckets_per_chunk": Option(int, 1, "n_buckets = buckets_per_chunk * n / bucket_size; 1 as reformer-pytorch, "
                                    "2 as the paper (chunk m = 2n/n_buckets)", check=positive),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rotations = None  # the last draw, (dh, n_hashes, n_buckets/2); not a parameter
        self._replay = False

    @classmethod
    def n_buckets(cls, options: dict, seq_len: int) -> int:
        return options["buckets_per_chunk"] * seq_len // options["bucket_size"]

    @classmethod
    def check_shape(cls, options, seq_len, heads, head_dim):
        c, k = options["bucket_size"], options["buckets_per_chunk"]
        span = 2 * c if k % 2 else c  # the rotation hash needs an even number of buckets
        if seq_len % span:
            up = -(-seq_len // span) * span
            if k % 2:
                fit = next((b for b in range(c, 0, -1) if seq_len % (2 * b) == 0), None)
                need = f"2*bucket_size={span} (an even number of buckets)"
            else:
                fit = next((b for b in range(c, 0, -1) if seq_len % b == 0), None)
                need = f"bucket_size={span}"
            alt = f" or bucket_size={fit}" if fit else ""
            raise VariantError(f"lsh needs seq_len to be a multiple of {need}, got {seq_len}: use seq_len={up}{alt}")

    # --- cost formulas (reports/scaling.py fits them at the measured lengths) ---------------
    @classmethod
    def cost_flops(cls, options: dict, seq_len: int, heads: int, head_dim: int, forward_only: bool = False) -> float:
        """Matmul FLOPs of ``core`` per batch row, forward + backward (attnprof's FLOP count):
        attention 2 einsums x 2 * (r*n) * 2c * dh forward, twice that backward; hashing
        n * dh * r * n_buckets forward only (no gradient), quadratic in n."""
        n, c, r = seq_len, options["bucket_size"], options["n_hashes"]
        attention = 8.0 * r * n * c * head_dim * (1 if forward_only else 3)
        hashing = float(n) * head_dim * r * cls.n_buckets(options, n)
        return heads * (attention + hashing)

    @classmethod
    def cost_bytes(cls, options: dict, seq_len: int, heads: int, head_dim: int, dtype_bytes: int = 4) -> float:
        """Peak bytes of ``core`` forward + backward per batch row. Every term is linear in n at
        a fixed bucket_size: scores r*n*2c (4 copies + 5 bytes of masks and indices each),
        gathered rows r*n*dh (6 copies), q/v/out and gradients n*dh (4), sort keys and
        permutations r*n (24 bytes). Within 4% of the tracked peak over r 1-4, c 32-128,
        dh 32-64, n 4K-16K, fp32; the paper options leave the peak as it is (their masks
        and the dedup count are transient in the forward, the peak is in the backward)."""
        n, c, r = seq_len, options["bucket_size"], options["n_hashes"]
        per_head = r * n * 2 * c * (4 * dtype_bytes + 5) + r * n * head_dim * 6 * dtype_bytes \
            + n * head_dim * 4 * dtype_bytes + r * n * 24
        return float(heads * per_head)

    @contextmanager
    def replay_hashes(self):
        """Inside this block every forward reuses the rotations of the forward before it
        (drawn afresh only if there is none), so a recomputation hashes exactly as the
        original did without touching the global RNG. Outside it each forward draws anew."""
        previous, self._replay = self._replay, True
        try:
            yield self
        finally:
            self._replay = previous

    def draw_rotations(self, x: torch.Tensor, n_buckets: int) -> torch.Tensor:
        shape = (x.shape[-1], self.n_hashes, n_buckets // 2)
        if not (self._replay and self.rotations is not None):
            # The global RNG, unseeded: checkpoint / reversible recomputation replays its state.
            self.rotations = torch.randn(shape, device=x.device, dtype=x.dtype)
        elif tuple(self.rotations.shape) != shape:
            raise RuntimeError(f"replay_hashes: stored rotations {tuple(self.rotations.shape)} != needed {shape}")
        return self.rotations.to(device=x.device, dtype=x.dtype)

    def core(self, q, k, v):
        """q is the shared qk (B, h, n, dh); k is the same tensor and is ignored."""
        b, h, n, dh = q.shape
        self.check_shape(self.options, n, h, dh)
        c, r = self.bucket_size, self.n_hashes
        n_buckets = self.n_buckets(self.options, n)
        per_round = n // c  # chunks per round
        chunks = r * per_round
        within_round = self.lookback == "within_round"

        # Hash, then sort by (round, bucket, position): one unique integer key per slot.
        # Blocks of 2c^2 positions keep the hash transient at 2c*n entries, as big as the scores.
        block = max(1, 2 * c * c // self.buckets_per_chunk)
        buckets = hash_buckets(q, self.draw_rotations(q, n_buckets), block=block)  # (B, h, r, n)
        rounds = torch.arange(r, device=q.device).view(r, 1) * n_buckets  # (r, 1)
        positions = torch.arange(n, device=q.device)  # (n,)
        keys = ((buckets + rounds) * n + positions).flatten(2)  # (B, h, r*n)
        order = keys.argsort(dim=-1)  # (B, h, r*n): sorted slot -> flat (round, position)
        undo = order.argsort(dim=-1)  # (B, h, r*n): flat (round, position) -> sorted slot
        source = order % n  # (B, h, r*n): original position of each sorted slot

        bq = gather_rows(q, source).view(b, h, chunks, c, dh)  # (B, h, C, c, dh)
        bk = look_one_back(F.normalize(bq, dim=-1))  # (B, h, C, 2c, dh)
        bv = look_one_back(gather_rows(v, source).view(b, h, chunks, c, dh))  # (B, h, C, 2c, dh)
        tq = source.view(b, h, chunks, c)  # (B, h, C, c)
        tk = look_one_back(tq)  # (B, h, C, 2c)

        dots = torch.einsum("bhcid,bhcjd->bhcij", bq, bk) * self.scale  # (B, h, C, c, 2c)
        if self.dedup:  # Appendix A, Eq. 7: - log N_ij, so the rounds together count each key once
            count = attended_counts(undo, source, buckets + rounds, c, per_round, within_round, self.bucket_mask,
                                    dots.dtype)
            dots = dots - count.clamp_(min=1).log_()  # entries no round attends are masked below
        hidden = None  # every entry the softmax must not see, masked in one go
        if self.causal:  # by original position, never by sorted slot
            hidden = tq.unsqueeze(-1) < tk.unsqueeze(-2)  # (B, h, C, c, 2c)
        if self.bucket_mask:  # Eq. 3: only the query's own bucket (of its own round)
            bucket = (keys.gather(-1, order) // n).view(b, h, chunks, c)  # (B, h, C, c): round*nb + bucket
            other = bucket.unsqueeze(-1) != look_one_back(bucket).unsqueeze(-2)  # (B, h, C, c, 2c)
            hidden = other if hidden is None else hidden | other
        if within_round:  # a round's first chunk looks back at nothing (no wrap, no previous round)
            first = torch.arange(chunks, device=q.device) % per_round == 0  # (C,)
            back = torch.arange(2 * c, device=q.device) >= c  # (2c,)
            crossing = first.view(chunks, 1, 1) & back.view(1, 1, 2 * c)  # (C, 1, 2c)
            hidden = crossing if hidden is None else hidden | crossing
        if hidden is not None:
            dots = dots.masked_fill(hidden, mask_value(dots.dtype))
        itself = tq.unsqueeze(-1) == tk.unsqueeze(-2)  # (B, h, C, c, 2c)
        dots = dots.masked_fill(itself, self_mask_value(dots.dtype))

        # softmax(dots) equals exp(dots - lse) but sums to 1 even when lse is large (a lone
        # self key gives lse ~ -1e5, where bf16 steps by 512 and fp32 by 0.008).
        lse = dots.logsumexp(dim=-1)  # (B, h, C, c)
        out = torch.einsum("bhcij,bhcjd->bhcid", dots.softmax(dim=-1), bv)  # (B, h, C, c, dh)

        # Undo the sort, then weight each round by its share of the total softmax mass:
        # exp(lse_r - logsumexp_r(lse)), i.e. a softmax over the rounds, for the same reason.
        out = gather_rows(out.reshape(b, h, r * n, dh), undo).view(b, h, r, n, dh)  # (B, h, r, n, dh)
        lse = lse.reshape(b, h, r * n).gather(-1, undo).view(b, h, r, n, 1)  # (B, h, r, n, 1)
        return (out * lse.softmax(dim=2)).sum(dim=2)  # (B, h, n, dh)
