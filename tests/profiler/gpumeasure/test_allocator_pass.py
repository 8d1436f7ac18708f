"""profiler/gpumeasure/allocator_pass.py: a point's memory pass, allocator and NVML figures.

Runs on a CPU-only machine: NVML and torch.cuda's allocator API are replaced by fakes
(tests/fake_nvml.py). The test at the end (marked ``gpu``) uses the real device.
"""

from __future__ import annotations

import os
from dataclasses import fields

import pytest
import torch

from attnprof.profiler.gpumeasure.allocator_pass import cuda_memory_pass
from attnprof.profiler.gpumeasure.nvml import NO_PID_MATCH
from attnprof.profiler.records import PointRecord
from fake_nvml import GiB, FakeNvml, proc, without_nvml

MiB = 1 << 20
MEMORY_KEYS = {"measured_peak_bytes", "cuda_reserved_peak_bytes", "nvml_device_peak_bytes",
               "nvml_process_peak_bytes", "nvml_baseline_bytes", "nvml_note"}


@pytest.fixture
def no_nvml(monkeypatch):
    without_nvml(monkeypatch)


# --- cuda_memory_pass ----------------------------------------------------------------------
@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's allocator API, recording the order of calls."""
    calls: list = []
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: calls.append(_n))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 300 * MiB)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 320 * MiB)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return calls


def test_cuda_memory_pass_returns_the_allocator_and_nvml_figures(monkeypatch, fake_cuda):
    FakeNvml(used=[GiB, GiB + 400 * MiB], procs=[proc(os.getpid(), 500 * MiB)]).install(monkeypatch)
    result = cuda_memory_pass(lambda: fake_cuda.append("step"), "cuda:0")
    assert set(result) == MEMORY_KEYS
    assert MEMORY_KEYS <= {f.name for f in fields(PointRecord)}
    assert result["measured_peak_bytes"] == 300 * MiB
    assert result["cuda_reserved_peak_bytes"] == 320 * MiB
    assert result["nvml_device_peak_bytes"] == GiB + 400 * MiB
    assert result["nvml_process_peak_bytes"] == result["nvml_baseline_bytes"] == 500 * MiB
    assert fake_cuda.index("reset_peak_memory_stats") < fake_cuda.index("step")
    assert fake_cuda[fake_cuda.index("step") + 1] == "synchronize"  # still inside the sampler
    PointRecord(variant="full", mode="plain", scope="model", seq_len=1, batch=1, d_model=8, heads=1,
                head_dim=8, layers=1, dtype="float32", **result)


def test_cuda_memory_pass_without_nvml_still_has_the_allocator_figures(fake_cuda, no_nvml):
    result = cuda_memory_pass(lambda: None, "cuda")
    assert result["measured_peak_bytes"] == 300 * MiB
    assert result["nvml_device_peak_bytes"] is None and result["nvml_baseline_bytes"] is None
    assert result["nvml_note"].startswith("no NVML")


def test_cuda_memory_pass_baseline_falls_back_to_device_wide(monkeypatch, fake_cuda):
    FakeNvml(used=[2 * GiB], procs=[proc(1, GiB), proc(2, GiB)]).install(monkeypatch)
    result = cuda_memory_pass(lambda: None, 0)
    assert result["nvml_baseline_bytes"] == 2 * GiB
    assert result["nvml_note"] == f"{NO_PID_MATCH}; baseline is device-wide"


def test_cuda_memory_pass_lets_an_oom_through(monkeypatch, fake_cuda):
    fake = FakeNvml().install(monkeypatch)

    def step():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        cuda_memory_pass(step, "cuda:0")
    assert fake.inits == 0


def test_cuda_memory_pass_rejects_a_cpu_device():
    with pytest.raises(ValueError, match="not a CUDA device"):
        cuda_memory_pass(lambda: None, "cpu")


# --- on a real GPU -------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_memory_pass_sees_a_256_mib_allocation():
    device = torch.device("cuda", 0)
    size = 256 * MiB

    def step():
        x = torch.empty(size, dtype=torch.uint8, device=device)
        x.fill_(1)
        del x

    torch.zeros(1, device=device)  # the CUDA context exists before the baseline
    result = cuda_memory_pass(step, device)
    print(result)
    assert result["measured_peak_bytes"] >= size
    assert result["cuda_reserved_peak_bytes"] >= result["measured_peak_bytes"]
    if result["nvml_device_peak_bytes"] is not None:  # NVML present on any real driver install
        assert result["nvml_device_peak_bytes"] >= size
        assert result["nvml_baseline_bytes"] > 0
    if result["nvml_process_peak_bytes"] is not None:
        assert result["nvml_process_peak_bytes"] >= size
