"""profiler/gpumeasure/gpu_facts.py: a GPU's facts and memory, NVML first, torch in a probe process.

Runs on a CPU-only machine: NVML and torch.cuda are replaced by fakes (tests/fake_nvml.py).
measure/test_host.py tests the same facts through the run's environment.
"""

from __future__ import annotations

import pytest
import torch

from attnprof.profiler.gpumeasure import devices
from attnprof.profiler.gpumeasure.gpu_facts import fill_gpu_facts, gpu_memory_bytes, torch_facts
from fake_nvml import GiB, FakeNvml, without_nvml


def empty_env() -> dict:
    return {"device_name": None, "device_memory_bytes": None, "driver": None, "compute_capability": None}


def test_facts_from_nvml_leave_no_note(monkeypatch):
    FakeNvml(total=80 * GiB).install(monkeypatch)
    env, notes = empty_env(), []
    fill_gpu_facts(env, "cuda:0", notes)
    assert env == {"device_name": "NVIDIA H200", "device_memory_bytes": 80 * GiB, "driver": "570.86.15",
                   "compute_capability": "9.0"}
    assert notes == []


def test_without_nvml_or_a_device_the_facts_stay_empty_and_say_why(monkeypatch):
    without_nvml(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(devices, "probe", lambda: {"count": 0, "error": "no driver"})
    env, notes = empty_env(), []
    fill_gpu_facts(env, "cuda", notes)
    assert env == empty_env()
    assert notes[0].startswith("no NVML") and notes[-1] == "no CUDA device: no driver"
    assert torch_facts(0) == {}


def test_memory_without_nvml_or_torch_is_an_error_naming_why(monkeypatch):
    without_nvml(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(devices, "probe", lambda: {"count": 0, "error": "no driver"})
    with pytest.raises(RuntimeError, match=r"cannot read the memory of cuda:1: no NVML and no CUDA \(no driver\)"):
        gpu_memory_bytes("cuda:1")
