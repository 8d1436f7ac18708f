"""The Sparse Transformer's index sets (scenarios.variants.sparse_patterns) against brute
force and by hand: strided and fixed A¹/A², the default stride, distinct summary sub-blocks."""

import pytest

from attnprof.scenarios.variants.sparse_patterns import default_stride, fixed_sets, strided_sets


# --- 1. the index sets are the paper's --------------------------------------------------------
def brute_strided(i, n, l, causal):
    near = [j for j in range(n) if (max(0, i - l) <= j <= i if causal else abs(i - j) <= l)]
    step = [j for j in range(n) if (i - j) % l == 0 and (j <= i or not causal)]
    return set(near), set(step)


def brute_fixed(i, n, l, c, causal):
    block = [j for j in range(n) if j // l == i // l and (j <= i or not causal)]
    summ = [j for j in range(n) if j % l in range(l - c, l) and (j <= i or not causal)]
    return set(block), set(summ)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("l", [2, 4, 8, 16])
def test_index_sets_match_paper(l, causal):
    n = 64
    for i in range(n):
        assert strided_sets(i, n, l, causal) == brute_strided(i, n, l, causal)
        for c in {1, l // 2, l}:
            assert fixed_sets(i, n, l, c, causal) == brute_fixed(i, n, l, c, causal)


def test_index_sets_by_hand():
    assert strided_sets(10, 64, 4, True) == ({6, 7, 8, 9, 10}, {2, 6, 10})
    assert strided_sets(1, 16, 4, False) == ({0, 1, 2, 3, 4, 5}, {1, 5, 9, 13})
    assert fixed_sets(10, 64, 4, 2, True) == ({8, 9, 10}, {2, 3, 6, 7, 10})
    assert fixed_sets(1, 12, 4, 1, False) == ({0, 1, 2, 3}, {3, 7, 11})


def test_default_stride_is_nearest_power_of_two_to_sqrt_n():
    assert [default_stride(n) for n in (64, 128, 256, 1000, 2048, 4096, 16384)] == [8, 8, 16, 32, 32, 64, 128]


# --- 2. exact against a dense masked reference ------------------------------------------------


# --- 7. distinct summary sub-blocks per head (fixed, §4.2) --------------------------------------
def brute_fixed_group(i, n, l, c, causal, g):
    """A² of the g-th A²-head: the g-th sub-block of c counted from each block's end."""
    k = g % (l // c)
    return {j for j in range(n) if l - c * (k + 1) <= j % l < l - c * k and (j <= i or not causal)}


@pytest.mark.parametrize("causal", [True, False])
def test_distinct_summary_sets(causal):
    n = 64
    for l, c in ((8, 2), (16, 4), (16, 16), (8, 3)):
        for g in range(6):
            for i in range(n):
                a1, a2 = fixed_sets(i, n, l, c, causal, group=g)
                assert a2 == brute_fixed_group(i, n, l, c, causal, g)
                assert a1 == brute_fixed(i, n, l, c, causal)[0]
    assert fixed_sets(10, 32, 8, 2, True, group=0)[1] == fixed_sets(10, 32, 8, 2, True)[1] == {6, 7}
    assert fixed_sets(30, 32, 8, 2, False, group=1)[1] == {4, 5, 12, 13, 20, 21, 28, 29}
    assert fixed_sets(30, 32, 8, 2, False, group=5)[1] == fixed_sets(30, 32, 8, 2, False, group=1)[1]  # l/c = 4
