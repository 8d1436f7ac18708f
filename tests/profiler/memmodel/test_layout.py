"""Layout tests on traced shapes and strides (profiler/memmodel/layout.py)."""

from attnprof.profiler.memmodel.layout import contiguous, dense


def test_contiguous_is_row_major_and_ignores_size_one_dimensions():
    assert contiguous((2, 3, 4), (12, 4, 1))
    assert contiguous((1, 3, 4), (99, 4, 1))  # a size-1 dimension's stride addresses nothing
    assert not contiguous((2, 3, 4), (12, 1, 3))
    assert not contiguous((4, 3), (1, 4))  # a transpose


def test_dense_accepts_any_order_but_no_gaps_or_overlaps():
    assert dense((4, 3), (1, 4)) and dense((2, 16, 128, 64), (131072, 64, 1024, 1))  # [B, n, H, d]-major
    assert not dense((2, 3), (6, 1))  # a gap between rows
    assert not dense((2, 3), (0, 1))  # broadcast: overlapping
