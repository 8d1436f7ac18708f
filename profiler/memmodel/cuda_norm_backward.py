"""The partial sums a CUDA norm's backward allocates for its weight's gradient over many rows (issue 39).

LayerNorm's and RMSNorm's backward on CUDA (``native_layer_norm_backward`` and
``_fused_rms_norm_backward``: aten/src/ATen/native/cuda/layer_norm_kernel.cu, the gamma/beta
kernels both share) compute dgamma (and LayerNorm's dbeta) in ``LaunchGammaBetaBackwardCUDAKernel``.
When there are many rows and few columns,

    M > 64 * 1024  and  N / block_dim_x < sm_count / 2        (integer divisions; block_dim_x = 32 on CUDA)

it parallelises over the rows: ``blocks.x = ceil(N / 32)``, ``blocks.y = min(32768 / blocks.x,
ceil(M / 32))`` (rows_per_block_y 32, max_grid_size 64 * 1024 / 2), allocates
``dgamma_blocks = at::empty({blocks.y, N}, dgamma.options())`` (and ``dbeta_blocks`` for LayerNorm),
writes one partial sum per block row, then ``*dgamma = dgamma_blocks.sum(0)``: a new tensor (a
column sum, with Reduce.cuh's staging buffer where it splits: cuda_reduce.py) replaces the dgamma
the op allocated first, which is freed there; the partial buffers are freed on return, dbeta's first
(destroyed in reverse order). Otherwise the kernels write dgamma in place and allocate nothing.

M = the rows (B·n for a norm over d_model), N = the normalized size (the weight's elements). On an
H200 (132 SMs) the branch is taken for N < 2112 (d_model 1024 or 2048) once B·n exceeds 65,536.
Read from a copy of layer_norm_kernel.cu with RMSNorm's templated kernels (torch 2.9 and later;
the file of torch 2.11 is not in the sources this project can read, so the version is not pinned):
a rule the GPU check's long points would show wrong, not a fitted figure.
"""

from __future__ import annotations

from math import prod
from typing import Optional

BLOCK_DIM_X = 32  # CUDA (ROCm: 64)
ROWS_PER_BLOCK_Y = 32
MAX_GRID_SIZE = 64 * 1024 // 2
MIN_ROWS = 64 * 1024


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def partial_rows(m: int, n: int, sm_count: int) -> int:
    """The rows of each partial-sum buffer (blocks.y), 0 when the kernels need none."""
    if n <= 0 or not (m > MIN_ROWS and n // BLOCK_DIM_X < sm_count // 2):
        return 0
    return min(MAX_GRID_SIZE // _div_up(n, BLOCK_DIM_X), _div_up(m, ROWS_PER_BLOCK_Y))


def norm_backward_outputs(name: str, scalars: list, args: list) -> Optional[tuple]:
    """(M, N, which of dX, dgamma, dbeta the op returns, the weight's dtype) of a traced norm
    backward, None where the trace does not say. ``native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
    weight, bias, output_mask[3])``; ``_fused_rms_norm_backward(grad_out, input, normalized_shape,
    rstd, weight, output_mask[2])``."""
    rms = name.startswith("_fused_rms_norm_backward")
    mask = scalars[5 if rms else 7] if len(scalars) > (5 if rms else 7) else None
    weight = args[4 if rms else 5] if len(args) > (4 if rms else 5) else None
    x = args[1] if len(args) > 1 else None
    if x is None or weight is None or not isinstance(mask, tuple) or not all(isinstance(b, bool) for b in mask):
        return None
    n, numel = prod(weight.shape), prod(x.shape)
    if n == 0 or numel % n:
        return None
    wanted = (mask[0], mask[1], False if rms else mask[2])
    return numel // n, n, wanted, weight.dtype
