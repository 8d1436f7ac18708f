"""Reformer LSH attention: hash the shared query-keys, sort by bucket, attend in chunks.

Kitaev, Kaiser & Levskaya 2020, "Reformer: The Efficient Transformer", arXiv 2001.04451, §2.
Angular LSH by random rotations buckets similar vectors together; after a sort by
(bucket, position) each chunk of ``bucket_size`` queries attends to its own chunk and the
one before it. Keys are the L2-normalised queries (shared-QK). ``n_hashes`` rounds are
combined by their softmax normalisers. Memory is O(n_hashes * n * bucket_size): nothing of
size n x n is ever built.
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
    parts = []
    for part in x.split(block, dim=2):
        rotated = torch.einsum("bhnd,drk->bhrnk", part, rotations)  # (B, h, r, n_blk, nb/2)
        parts.append(torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1))  # (B, h, r, n_blk)
    return torch.cat(parts, dim=-1)  # (B, h, r, n)


@register_variant("lsh")
class LSHAttention(Attention):
    description = "Reformer LSH attention: shared-QK, hashed into sorted chunks (linear memory)"
    paper = "Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer, arXiv 2001.04451"
    shared_qk = True
    complexity = (1.0, 1.0)  # at fixed bucket_size; hashing adds n * n_buckets * dh FLOPs
    OPTIONS = {
        **Attention.OPTIONS,
        "n_hashes": Option(int, 2, "hash rounds; more = closer to full attention, cost linear in it", check=positive),
        "bucket_size": Option(int, 64, "queries per chunk; each query sees 2*bucket_size keys", check=positive),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rotations = None  # the last draw, (dh, n_hashes, n_buckets/2); not a parameter
        self._replay = False

    @classmethod
    def check_shape(cls, options, seq_len, heads, head_dim):
        span = 2 * options["bucket_size"]  # the rotation hash needs an even number of buckets
        if seq_len % span:
            up = -(-seq_len // span) * span
            fit = next((b for b in range(span // 2, 0, -1) if seq_len % (2 * b) == 0), None)
            alt = f" or bucket_size={fit}" if fit else ""
            raise VariantError(
                f"lsh needs seq_len to be a multiple of 2*bucket_size={span} (an even number of "
                f"buckets), got {seq_len}: use seq_len={up}{alt}"
            )

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
        n_buckets = n // c
        chunks = r * n_buckets

        # Hash, then sort by (round, bucket, position): one unique integer key per slot.
        # Blocks of 2c^2 positions keep the hash transient at 2c*n entries, as big as the scores.
        buckets = hash_buckets(q, self.draw_rotations(q, n_buckets), block=2 * c * c)  # (B, h, r, n)
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
        if self.causal:  # by original position, never by sorted slot
            future = tq.unsqueeze(-1) < tk.unsqueeze(-2)  # (B, h, C, c, 2c)
            dots = dots.masked_fill(future, mask_value(dots.dtype))
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
