"""Reduce.cuh's own allocations (profiler/memmodel/cuda_reduce.py): the closed forms the
configuration gives for the shapes a model's step reduces, and where the model declines."""

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.cuda_reduce import reduce_buffers, threads_per_sm

H200 = get_gpu("h200")


def _buffers(shape, dims, dtype="bfloat16", gpu=H200, stride=None):
    if stride is None:
        stride, step = [], 1
        for s in reversed(shape):
            stride.insert(0, step)
            step *= s
    return reduce_buffers(shape, stride, dims, dtype, gpu.sm_count, gpu.compute_capability)


@pytest.mark.parametrize("n", [1024, 4096, 8192, 16384])
def test_a_bias_gradients_column_sum_stages_8192_bytes_a_row_at_d_model_1024(n):
    # 32 x 4 threads, 4 outputs each: 8 blocks per row of outputs; ctas = min(ceil(2112 / 8),
    # ceil(n / 4 / 16)) = n / 64; staging = 4 B * 1024 * ctas * 32 * 4 (the x-multiplier)
    assert _buffers((n, 1024), [0]) == (8192 * n, 32)
    assert _buffers((n, 1024), [0], "float32") == (8192 * n, 32)  # the accumulate type is float32 for both
    assert _buffers((1, n, 1024), [0, 1]) == (8192 * n, 32)  # sum_to of a batch-1 gradient: coalesced


def test_the_ctas_stop_at_the_gpus_resident_blocks():
    # at 64K rows ceil(2112 / 8) = 264 CTAs per output column bound it, not n / 64
    assert _buffers((65536, 1024), [0]) == (4 * 1024 * 264 * 128, 32)
    a100 = get_gpu("a100-80gb")  # 108 SMs x 2048 threads: 1728 blocks of 128
    assert _buffers((65536, 1024), [0], gpu=a100) == (4 * 1024 * 216 * 128, 32)
    assert threads_per_sm((8, 9)) == 1536 and threads_per_sm((9, 0)) == 2048


def test_row_sums_and_small_sums_need_no_staging():
    assert _buffers((8192, 1024), [1]) == (0, 0)  # along the fastest dimension: one block per row
    assert _buffers((64, 1024), [0]) == (0, 0)  # too few values per thread to split across blocks
    whole = _buffers((1, 8192, 1024), [])  # the loss: block_x_reduce, no x-multiplier
    assert whole is not None and 0 < whole[0] < 1 << 20


def test_what_the_model_does_not_know_is_none():
    assert _buffers((8192, 1024), [0], "int64") is None
    assert _buffers((65536, 65536), [0]) is None  # beyond 32-bit indexing: torch splits it


def test_the_whole_sum_of_a_loss_is_a_few_kilobytes():
    # vectorised along the input: 512 threads, 528 CTAs (132 SMs x 4 blocks), one float each
    assert _buffers((1, 8192, 1024), []) == (4 * 528, 4)


def test_iterator_order_follows_tensoriterator():
    n = 4096
    # the transposed view of an (n, d) gradient, reduced over its n: the same column sum
    assert _buffers((1024, n), [1], stride=(1, 1024)) == (8192 * n, 32)
    # a broadcast (stride 0) reduced dimension: reorder_dimensions leaves it undecided, not first
    assert _buffers((8, 4096, 1024), [0, 1], stride=(0, 1024, 1)) == (4 * 1024 * 264 * 128, 32)
    # 1026 outputs: vectors of 2 (1026 % 4 != 0), so 256 threads of 2 outputs
    size, _ = _buffers((n, 1026), [0])
    assert size > 0 and size % (4 * 1026 * 2) == 0


def test_a_0d_input_and_the_32bit_byte_limit():
    assert _buffers((), [0]) == (0, 0)
    # can_use_32bit_indexing counts bytes: 2**20 rows of 1024 fit in bfloat16, not in float32
    assert _buffers((1 << 20, 1024), [0]) is not None
    assert _buffers((1 << 20, 1024), [0], "float32") is None
