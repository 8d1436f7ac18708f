"""CUDA devices counted without initialising CUDA, or poisoning fork, in this process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from attnprof.profiler.gpumeasure import devices


@pytest.fixture(autouse=True)
def no_answers():
    devices.forget_answers()
    yield
    devices.forget_answers()


def test_a_cpu_build_has_no_devices_and_asks_nobody(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: False)
    monkeypatch.setattr(devices, "probe", lambda: pytest.fail("probed"))
    assert devices.device_count() == 0 and not devices.cuda_available()


def test_nvml_answers_first_and_torch_is_never_asked_here(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 2, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: pytest.fail("poisoned fork"), raising=False)
    monkeypatch.setattr(devices, "probe", lambda: pytest.fail("probed"))
    assert devices.device_count() == 2


def test_without_nvml_a_throw_away_process_answers(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: pytest.fail("poisoned fork"), raising=False)
    # the real probe: a fresh interpreter whose torch (the CPU build here) says 0, not an error
    assert devices.device_count() == 0
    answer = devices.probe()
    assert answer["count"] == 0 and answer["torch"] == torch.__version__ and "error" not in answer
    assert devices.probe() is answer  # asked once per CUDA_VISIBLE_DEVICES


def test_a_failing_probe_is_an_answer_not_a_crash(monkeypatch):
    monkeypatch.setattr(devices.sys, "executable", "/nonexistent/python")
    answer = devices.probe()
    assert answer["count"] == 0 and answer["error"]


def test_pci_bus_order_on_a_childs_environment():
    env = {}
    devices.prefer_pci_bus_order(env)
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} and os.environ is not env


def test_pci_bus_order_is_the_default_and_a_user_choice_is_kept(monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    devices.prefer_pci_bus_order()
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    devices.prefer_pci_bus_order()
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_importing_the_gpu_measuring_modules_changes_no_environment():
    """The device order is set by an explicit call (prefer_pci_bus_order, where a sweep
    starts), never as a side effect of an import."""
    code = ("import os; import attnprof.profiler.gpumeasure.nvml, attnprof.profiler.gpumeasure.allocator_pass, "
            "attnprof.profiler.gpumeasure.gpu_facts, attnprof.profiler.gpumeasure.devices, "
            "attnprof.profiler.gpumeasure.sdpa_spy, attnprof.profiler.measure.host; "
            "print(os.environ.get('CUDA_DEVICE_ORDER', 'unset'))")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_ORDER"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "unset"
