"""A traced tensor's layout from its shape and strides (in elements): what CUDA kernels test
before they copy an argument. Size-1 dimensions never count (their stride addresses nothing)."""

from __future__ import annotations


def contiguous(shape, stride) -> bool:
    """Row-major contiguous (``is_contiguous()``)."""
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


def dense(shape, stride) -> bool:
    """Non-overlapping and dense, in any order of dimensions (``empty_like`` keeps such strides)."""
    dims = sorted((st, size) for size, st in zip(shape, stride) if size != 1)
    expected = 1
    for st, size in dims:
        if st != expected:
            return False
        expected *= size
    return True
