"""The Sparse Transformer's index sets A¹(i), A²(i), as plain predicates and python sets.

Child et al. 2019, "Generating Long Sequences with Sparse Transformers", arXiv 1904.10509,
§4.2 (stride l, summary width c). Each predicate ``pred(i, j)`` says whether query i may
attend key j. It is written with ``&``, ``%``, ``//`` and ``abs`` only, so it evaluates on
python ints (the sets below, tests, docs) and on broadcast integer tensors alike (the
block-wise masks in ``sparse.py``): one definition, two uses.
"""

from __future__ import annotations

import math


def default_stride(n: int) -> int:
    """The power of two nearest √n (the paper takes l ≈ √n); a tie goes to the smaller."""
    lo = 1 << (max(1, math.isqrt(n)).bit_length() - 1)  # largest power of two ≤ √n
    # √n is nearer lo than 2·lo iff √n ≤ 1.5·lo, i.e. 4n ≤ 9·lo² (kept in integers).
    return lo if 4 * n <= 9 * lo * lo else 2 * lo


# --- strided (§4.2, "strided attention"): a local band plus every l-th earlier key -------
def strided_a1(i, j, l: int, causal: bool):
    """A¹: max(0, i−l) ≤ j ≤ i; bidirectional |i−j| ≤ l."""
    if causal:
        return (i - l <= j) & (j <= i)
    return abs(i - j) <= l


def strided_a2(i, j, l: int, causal: bool):
    """A²: (i−j) mod l = 0 (and j ≤ i when causal)."""
    hit = (i - j) % l == 0
    return hit & (j <= i) if causal else hit


def sliding_window(i, j, w: int, causal: bool):
    """A window of w keys ending at the query: max(0, i−w+1) ≤ j ≤ i; bidirectional |i−j| ≤ w−1
    (Mistral's and Longformer's local attention, ``sliding_window.py``): strided A¹ with l = w − 1,
    the same set (test_sliding_window.py checks it). Both bounds are on i alone, so on broadcast
    tensors only bool results are scores-sized (``abs(i − j)`` would make an int64 one)."""
    reach = i - (w - 1) <= j
    return reach & (j <= i) if causal else reach & (j <= i + (w - 1))


# --- fixed (§4.2, "fixed attention"): own block plus the last c keys of every block ---------
def fixed_a1(i, j, l: int, c: int, causal: bool):
    """A¹: ⌊j/l⌋ = ⌊i/l⌋ (and j ≤ i when causal)."""
    same = i // l == j // l
    return same & (j <= i) if causal else same


def summary_start(l: int, c: int, group=0):
    """First offset in a block of the summary sub-block of A²-head ``group``: l − c·(g mod ⌊l/c⌋ + 1).

    Group 0 (every head by default) takes the last c positions l−c … l−1; with distinct
    summaries (§4.2: "having them attend to distinct subblocks of length c within the block
    of size l was preferable") group g takes the g-th sub-block counted from the block's
    end, l−c·(g+1) … l−c·g−1, cycling after ⌊l/c⌋ heads. ``group`` may be an int tensor."""
    return l - c * (group % (l // c) + 1)


def fixed_a2(i, j, l: int, c: int, causal: bool, group=0):
    """A²: j mod l ∈ {s, …, s+c−1}, s = summary_start(l, c, group), l−c for group 0
    (and j ≤ i when causal)."""
    start = summary_start(l, c, group)
    offset = j % l
    summary = (offset >= start) & (offset < start + c)
    return summary & (j <= i) if causal else summary


def strided_sets(i: int, n: int, l: int, causal: bool = True) -> tuple[set[int], set[int]]:
    """(A¹(i), A²(i)) of strided attention over keys 0..n−1."""
    return ({j for j in range(n) if strided_a1(i, j, l, causal)},
            {j for j in range(n) if strided_a2(i, j, l, causal)})


def fixed_sets(i: int, n: int, l: int, c: int, causal: bool = True, group: int = 0) -> tuple[set[int], set[int]]:
    """(A¹(i), A²(i)) of fixed attention over keys 0..n−1; A² of the A²-head ``group``."""
    return ({j for j in range(n) if fixed_a1(i, j, l, c, causal)},
            {j for j in range(n) if fixed_a2(i, j, l, c, causal, group)})


def sliding_window_set(i: int, n: int, w: int, causal: bool = True) -> set[int]:
    """The keys among 0..n−1 that query i sees in a sliding window of w."""
    return {j for j in range(n) if sliding_window(i, j, w, causal)}
