"""FLOP counting (profiler/measure/flops.py): torch's per-op formulas, plus the CPU flash
attention kernels torch's registry counts as zero (halved when causal), in a mode that
only reads shapes and keeps no tensor alive."""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from attnprof.profiler.measure.flops import FlopCounter


def counted(fn) -> int:
    with FlopCounter() as counter:
        fn()
    return counter.total


def test_a_matmul_is_two_flops_per_multiply_add_and_an_add_is_none():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert counted(lambda: a @ b) == 2 * 8 * 16 * 4
    assert counted(lambda: a + a) == 0


def test_cpu_flash_attention_is_counted_and_causal_is_half():
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    full = counted(lambda: F.scaled_dot_product_attention(q, k, v))
    causal = counted(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert full == 2 * (2 * 1 * 2 * 64 * 64 * 16)  # QK^T and PV: two matmuls per head
    assert causal == full // 2


def test_backward_is_counted_too():
    q, k, v = (torch.randn(1, 2, 64, 16, requires_grad=True) for _ in range(3))
    forward = counted(lambda: F.scaled_dot_product_attention(q, k, v))
    with FlopCounter() as counter:
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    assert counter.total > 2 * forward  # the backward runs more matmuls than the forward


def test_the_counter_keeps_no_tensor_alive():
    with FlopCounter() as counter:
        out = torch.randn(32, 32) @ torch.randn(32, 32)
        gone = weakref.ref(out)
        del out
        assert gone() is None
    assert counter.total == 2 * 32 ** 3
