"""The SDPA kernel torch ran, read off the dispatcher: a CUDA record's
``gpu_sdpa_backend_measured`` (checked here on the CPU's own kernels)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnprof.profiler.gpumeasure.sdpa_spy import SdpaSpy
from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner import worker


def _step(q):
    F.scaled_dot_product_attention(q, q, q).sum().backward()


def test_the_cpu_flash_kernel_is_seen():
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    with SdpaSpy() as spy:
        _step(q)
    assert spy.backends == {"flash": 1} and spy.summary() == "flash"


def test_the_math_path_has_no_op_of_its_own_and_is_still_seen():
    q = torch.randn(1, 2, 64, 16, requires_grad=True)
    with sdpa_kernel(SDPBackend.MATH), SdpaSpy() as spy:
        _step(q)
        _step(q)
    assert spy.backends == {"math": 2}


def test_no_sdpa_no_backend():
    q = torch.randn(4, 4)
    with SdpaSpy() as spy:
        (q @ q).sum()
    assert spy.summary() == ""


def test_a_cuda_memory_pass_records_the_kernel_it_saw(monkeypatch):
    """The worker's CUDA memory pass, its allocator part stood in for by a CPU step."""
    monkeypatch.setattr("attnprof.profiler.gpumeasure.allocator_pass.cuda_memory_pass", lambda step, device: step() or {})
    point = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1))
    record = PointRecord.for_point(point)
    worker.record_cuda_memory(point, record, "cpu")
    assert record.gpu_sdpa_backend_measured == "flash" and record.measured_by == "cuda-allocator"
    full = Point("full", "plain", "model", point.shape)
    record = PointRecord.for_point(full)
    worker.record_cuda_memory(full, record, "cpu")
    assert record.gpu_sdpa_backend_measured == ""
