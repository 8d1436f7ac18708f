"""profiler/measure/host.py and profiler/gpumeasure/gpu_facts.py: what ran the points (the
host's CPU and RAM, a GPU's facts) and a sweep's default memory limit.

Runs on a CPU-only machine: NVML and torch.cuda are replaced by fakes (tests/fake_nvml.py).
The test at the end (marked ``gpu``) uses the real device and is skipped without one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from attnprof.profiler.measure import host
from attnprof.profiler.measure.host import default_memory_limit_bytes, device_environment
from fake_nvml import GiB, FakeNvml, without_nvml


@pytest.fixture
def no_nvml(monkeypatch):
    without_nvml(monkeypatch)


# --- environment and limits ----------------------------------------------------------------
def test_device_environment_cpu_has_model_cores_and_ram():
    env = device_environment("cpu")
    assert env["cpu"] and isinstance(env["cpu"], str)
    assert env["logical_cores"] >= 1
    assert env["ram_bytes"] > 0
    assert env["device_name"] == "cpu" and env["cuda"] is None


def test_device_environment_cuda_from_nvml_without_initialising_cuda(monkeypatch):
    FakeNvml(total=150 * GiB).install(monkeypatch)

    def no_torch(*a):
        raise AssertionError("torch.cuda must not be asked when NVML answers")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_torch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    env = device_environment("cuda:0")
    assert (env["device_name"], env["device_memory_bytes"]) == ("NVIDIA H200", 150 * GiB)
    assert (env["driver"], env["compute_capability"], env["note"]) == ("570.86.15", "9.0", "")


def test_device_environment_never_raises_without_gpu(no_nvml, monkeypatch):
    def no_cuda(*a):
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_cuda)
    env = device_environment("cuda")
    assert env["device_name"] is None and env["driver"] is None
    assert "no NVML" in env["note"] and "no CUDA device" in env["note"]
    assert env["ram_bytes"] > 0


def test_default_memory_limit_cpu_is_80_percent_of_available(monkeypatch):
    monkeypatch.setattr(host.psutil, "virtual_memory", lambda: SimpleNamespace(available=10 * GiB, total=16 * GiB))
    assert default_memory_limit_bytes("cpu") == int(0.8 * 10 * GiB)


def test_default_memory_limit_cuda_from_nvml_total(monkeypatch):
    FakeNvml(total=141 * GiB).install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: pytest.fail("CUDA initialised"))
    assert default_memory_limit_bytes("cuda:0") == 141 * GiB


def test_default_memory_limit_cuda_falls_back_to_torch_in_a_probe_process(monkeypatch, no_nvml):
    """Without NVML, torch answers, but from a throw-away process: asking here would poison fork."""
    from attnprof.profiler.gpumeasure import devices

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: pytest.fail("CUDA initialised in this process"))
    monkeypatch.setattr(devices, "probe", lambda: {"count": 1, "devices": [{"name": "H200", "capability": "9.0",
                                                                           "total_memory_bytes": 80 * GiB}]})
    assert default_memory_limit_bytes("cuda") == 80 * GiB


# --- on a real GPU -------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_device_environment_names_torchs_device():
    torch.zeros(1, device="cuda:0")
    env = device_environment("cuda:0")
    assert env["device_name"] == torch.cuda.get_device_name(0) and env["driver"], env
