"""The device memory a CUDA reduction kernel takes for itself (issue 39).

``sum`` and ``mean`` on CUDA run ``gpu_reduce_kernel`` (aten/src/ATen/native/cuda/Reduce.cuh,
torch 2.11). When ``setReduceConfig`` splits each output's inputs across thread blocks
(``should_global_reduce``), it allocates through the caching allocator, for the kernel's
duration only, a staging buffer of ``ReduceConfig::global_memory_size()`` bytes and
``semaphore_size()`` bytes of semaphores. The staging buffer is

    sizeof(acc) * num_outputs * ctas_per_output          (x block.x * output_vec_size when the
                                                            block does not reduce along x)

which, for a column sum (the reduced dimension is not the fastest-moving one, so the block
does not reduce along x), is ``block.x * output_vec_size`` = 128 times what the kernel indexes.
A bias gradient, ``sum`` over the n rows of an (n, d) gradient, is such a sum: on an H200,
with d = 1024 in bfloat16 or float32, ``ctas_per_output`` = n / 64 and the buffer is
4 * 1024 * (n / 64) * 32 * 4 = 8192 * n bytes, as large as an (n, 4 d) bfloat16 tensor, live
while the gradient it reduces (and, in plain mode, the MLP's saved activations) still are.
Measured on the H200 of 2026-12-04: exactly that (and the 32-byte semaphores rounded to one
512-byte block) at the peak of every plain-mode model point whose peak is the MLP's backward.

The iterator is prepared as TensorIterator prepares a reduction (``reorder_dimensions``' insertion
sort: the reduced dimensions first, then by increasing stride, broadcast strides undecided;
``coalesce_dimensions``), then ``setReduceConfig`` and ``set_block_dimension`` are followed step
by step. Assumed: the input's data pointer is 16-byte aligned (a fresh allocation, or a view at an
aligned offset). Not modelled (``reduce_buffers`` says None): an input whose largest byte offset
does not fit an int32 (``can_use_32bit_indexing``: torch splits the reduction into sub-iterators,
one buffer at a time, plus an accumulation buffer for 16-bit outputs).
"""

from __future__ import annotations

from math import prod
from typing import Optional, Sequence

MAX_NUM_THREADS = 512  # mnt_wrapper<T>::MAX_NUM_THREADS (256 for complex double only)
WARP = 32
MIN_VALUES_PER_THREAD, MAX_VALUES_PER_THREAD = 16, 256
INT32_MAX = 2 ** 31 - 1
# acc type of sum/mean on CUDA (at::opmath_type / acc_type, is_cuda=true)
ACC_BYTES = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 8}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# "Maximum number of resident threads per SM" (CUDA C++ Programming Guide, technical
# specifications per compute capability): cudaDeviceProp::maxThreadsPerMultiProcessor
THREADS_PER_SM = {(7, 0): 2048, (7, 5): 1024, (8, 0): 2048, (8, 6): 1536, (8, 7): 2048, (8, 9): 1536,
                  (9, 0): 2048, (10, 0): 2048, (12, 0): 1536}


def _last_pow2(n: int) -> int:
    """floor(log2(n)) as a power of two, at least 1 (Reduce.cuh ``last_pow2``)."""
    return max(1, 1 << (max(1, n).bit_length() - 1))


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def threads_per_sm(compute_capability: tuple) -> int:
    """maxThreadsPerMultiProcessor; a capability not in the table takes its major's most common figure."""
    major = compute_capability[0]
    return THREADS_PER_SM.get(tuple(compute_capability), 1536 if major in (8, 12) else 2048)


def _iterator(shape: Sequence[int], stride: Sequence[int], dims: Sequence[int]):
    """TensorIterator's view of a reduction of a tensor (shape, stride in elements) over ``dims``:
    [(size, input stride, reduced)], fastest first, reduced dimensions first, coalesced."""
    nd = len(shape)
    red = {d % nd for d in dims} if dims else set(range(nd))
    # the output: contiguous over the kept dimensions in their logical order, 0 on reduced ones
    out_stride, step = [0] * nd, 1
    for d in reversed(range(nd)):
        if d not in red:
            out_stride[d] = step
            step *= shape[d]
    operands = (out_stride, list(stride))  # TensorIterator's order: the output, then the input

    def should_swap(d0: int, d1: int) -> int:  # TensorIterator::reorder_dimensions
        for k, strides in enumerate(operands):
            s0, s1 = strides[d0], strides[d1]
            if k == 0 and (s0 == 0) != (s1 == 0):  # a reduction's output: reduced dimensions first
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:  # broadcast: no decision from this operand
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:  # equal strides: the smaller dimension first
                return 1
        return 0

    perm = list(reversed(range(nd)))  # starts from the innermost dimension; an insertion sort that
    for i in range(1, nd):  # leaves ambiguous pairs where they are
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    merged: list = []
    for d in perm:  # coalesce_dimensions: size-1 dimensions vanish, adjacent ones merge
        size, st, ost, r = shape[d], stride[d], out_stride[d], d in red
        if size == 1:
            continue
        if merged:
            psize, pst, post, pr = merged[-1]
            if pr == r and pst * psize == st and post * psize == ost:
                merged[-1] = (psize * size, pst, post, pr)
                continue
        merged.append((size, st, ost, r))
    return [(size, st, r) for size, st, _, r in merged]


def reduce_buffers(shape: Sequence[int], stride: Sequence[int], dims: Sequence[int], dtype: str,
                   sm_count: int, compute_capability: tuple) -> Optional[tuple]:
    """(staging buffer bytes, semaphore bytes) a CUDA ``sum``/``mean`` of this input allocates
    while it runs ((0, 0) when it needs none), or None where this model does not know
    (an unknown dtype, or an input beyond 32-bit indexing)."""
    if dtype not in ACC_BYTES or prod(shape) == 0:
        return None
    if not shape:  # a 0-d tensor: nothing to split
        return (0, 0)
    # can_use_32bit_indexing: every operand's largest byte offset fits an int32 (else torch splits the
    # reduction into sub-iterators with an accumulation buffer: not modelled)
    if sum((size - 1) * abs(st) for size, st in zip(shape, stride)) * ELEMENT_BYTES[dtype] >= INT32_MAX:
        return None
    it = _iterator(shape, stride, dims)
    if not it:
        return (0, 0)
    nr = sum(1 for e in it if e[2])
    num_outputs = prod(e[0] for e in it if not e[2])
    inputs_per_output = prod(shape) // max(1, num_outputs)
    fastest = nr == len(it) or it[0][1] < it[nr][1]
    if fastest:
        dim0, dim1, fastest_stride = inputs_per_output, num_outputs, it[0][1]
    else:
        dim0, dim1, fastest_stride = num_outputs, inputs_per_output, it[nr][1]
    output_vec = 1
    if fastest_stride == 1:
        if fastest and dim0 > 128 and nr == 1:  # vectorize along input (vt0 >= input_vec_size)
            dim0 //= 4
        elif not fastest:
            output_vec = 4  # get_output_vec_size (aligned data pointer)
            while output_vec > 1 and (it[nr][0] % output_vec or
                                      any(e[1] % output_vec for k, e in enumerate(it) if k != nr)):
                output_vec //= 2
            dim0 //= output_vec
    # set_block_dimension<scalar_t>
    max_threads = MAX_NUM_THREADS // output_vec
    d0 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    d1 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(d0, WARP)
    height = min(d1, max_threads // width)
    width = min(d0, max_threads // height)
    step_input = step_output = 1
    block_x_reduce = fastest
    if fastest:
        step_input *= width
    else:
        step_output *= width
    values_per_thread = _div_up(inputs_per_output, step_input)
    split_y = values_per_thread >= height * 16 or values_per_thread >= MAX_VALUES_PER_THREAD
    if split_y:
        step_input *= height
    else:
        step_output *= height
    grid_x = _div_up(num_outputs // output_vec, step_output)
    target = sm_count * (threads_per_sm(compute_capability) // (width * height))
    values_per_thread = _div_up(inputs_per_output, step_input)
    if not (split_y and values_per_thread >= MAX_VALUES_PER_THREAD and grid_x <= target):
        return (0, 0)
    ctas = max(min(_div_up(target, grid_x), _div_up(values_per_thread, MIN_VALUES_PER_THREAD)),
               _div_up(values_per_thread, MAX_VALUES_PER_THREAD))
    if ctas <= 1:
        return (0, 0)
    size = ACC_BYTES[dtype] * num_outputs * ctas
    if not block_x_reduce:
        size *= width * output_vec
    return (size, 4 * grid_x)
