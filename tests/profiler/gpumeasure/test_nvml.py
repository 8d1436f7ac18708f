"""profiler/gpumeasure/nvml.py: the NVML sampler, the NVML handle of a torch device.

Runs on a CPU-only machine: NVML and torch.cuda are replaced by fakes (tests/fake_nvml.py).
The test at the end (marked ``gpu``) uses the real device and is skipped without one.
"""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pynvml
import pytest
import torch

from attnprof.profiler.gpumeasure.nvml import NO_PID_MATCH, NvmlSampler, nvml_available, nvml_handle_for
from fake_nvml import GiB, FakeNvml, proc, without_nvml


@pytest.fixture
def no_nvml(monkeypatch):
    without_nvml(monkeypatch)


# --- NvmlSampler ---------------------------------------------------------------------------
def test_sampler_finds_the_peak_of_a_rising_and_falling_sequence(monkeypatch):
    sequence = [2 * GiB, 3 * GiB, 7 * GiB, 5 * GiB, 2 * GiB]
    fake = FakeNvml(used=sequence, procs=[proc(os.getpid(), GiB)]).install(monkeypatch)
    with NvmlSampler(0, interval_s=0.001) as sampler:
        fake.wait_for(lambda: fake.calls >= len(sequence))
    assert sampler.peak_device_bytes == max(sequence)
    assert sampler.baseline_device_bytes == sequence[0]
    assert sampler.samples >= len(sequence)
    assert sampler.peak_process_bytes == sampler.baseline_process_bytes == GiB
    assert sampler.note == ""
    assert fake.inits == 0  # every nvmlInit paired with a shutdown


def test_the_final_sample_at_exit_catches_a_peak_the_poll_missed(monkeypatch):
    FakeNvml(used=[GiB, 4 * GiB]).install(monkeypatch)
    with NvmlSampler(0, interval_s=60.0) as sampler:  # the thread never gets to poll
        pass
    assert (sampler.baseline_device_bytes, sampler.peak_device_bytes, sampler.samples) == (GiB, 4 * GiB, 2)


def new_threads(before: set) -> set:
    """Threads alive now that were not alive in ``before``."""
    return {t for t in threading.enumerate() if t not in before and t.is_alive()}


def test_sampler_thread_stops_when_the_body_raises(monkeypatch):
    fake = FakeNvml().install(monkeypatch)
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="boom"):
        with NvmlSampler(0, interval_s=0.001):
            assert new_threads(before)  # the poller runs inside the block
            raise RuntimeError("boom")
    assert not new_threads(before)  # and is gone once the block has left, even by an exception
    assert fake.inits == 0


def test_per_process_figure_is_ours_among_several(monkeypatch):
    FakeNvml(procs=[proc(1, 9 * GiB), proc(os.getpid(), 3 * GiB), proc(77, 5 * GiB)]).install(monkeypatch)
    with NvmlSampler(0) as sampler:
        pass
    assert sampler.peak_process_bytes == 3 * GiB
    assert sampler.note == ""


def test_per_process_falls_back_to_the_only_process_listed(monkeypatch):
    FakeNvml(procs=[proc(424242, 2 * GiB)]).install(monkeypatch)  # a host PID, not ours
    with NvmlSampler(0, pid=17) as sampler:
        pass
    assert sampler.peak_process_bytes == 2 * GiB
    assert "only process" in sampler.note and "424242" in sampler.note
    assert "\n" not in sampler.note


def test_per_process_is_none_when_several_processes_and_none_is_ours(monkeypatch):
    FakeNvml(procs=[proc(1, GiB), proc(2, 2 * GiB)]).install(monkeypatch)
    with NvmlSampler(0, pid=17) as sampler:
        pass
    assert sampler.peak_process_bytes is None and sampler.baseline_process_bytes is None
    assert sampler.peak_device_bytes == GiB
    assert sampler.note == NO_PID_MATCH


def test_per_process_note_counts_samples_where_we_were_not_listed(monkeypatch):
    # Our process appears only from the second sample on (its CUDA context came later).
    FakeNvml(procs=lambda i: [proc(os.getpid(), GiB)] if i > 1 else []).install(monkeypatch)
    with NvmlSampler(0, interval_s=60.0) as sampler:
        pass
    assert sampler.peak_process_bytes == GiB
    assert sampler.note == f"{NO_PID_MATCH} (1 of 2 samples)"


def test_sampler_without_nvml_is_a_no_op(no_nvml):
    with NvmlSampler(0, interval_s=0.001) as sampler:
        time.sleep(0.01)
    assert sampler.note.startswith("no NVML")
    assert sampler.peak_device_bytes is None and sampler.peak_process_bytes is None
    assert sampler.baseline_device_bytes is None and sampler.samples == 0
    assert nvml_available()[0] is False and nvml_available()[1].startswith("no NVML: ")


def test_nvml_failing_mid_run_is_noted_not_raised(monkeypatch):
    fake = FakeNvml(used=[GiB, 2 * GiB], fail_at=2).install(monkeypatch)
    before = set(threading.enumerate())
    with NvmlSampler(0, interval_s=0.001) as sampler:
        fake.wait_for(fake.failed.is_set)
        fake.wait_for(lambda: not new_threads(before))  # the poller ends itself on the failure
    assert "NVML failed mid-run after 2 samples" in sampler.note
    assert (sampler.peak_device_bytes, sampler.samples) == (2 * GiB, 2)
    assert fake.inits == 0


def test_nvml_failing_on_the_first_sample_leaves_a_no_op(monkeypatch):
    fake = FakeNvml(fail_at=0).install(monkeypatch)
    with NvmlSampler(3) as sampler:
        pass
    assert sampler.note.startswith("no NVML for cuda:3")
    assert sampler.peak_device_bytes is None and fake.inits == 0


# --- device numbering ----------------------------------------------------------------------
def test_handle_by_pci_bus_id_when_cuda_is_initialised(monkeypatch):
    FakeNvml().install(monkeypatch)
    asked = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(pci_bus_id=0x3B, pci_domain_id=0, pci_device_id=0))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByPciBusId", lambda bus: asked.append(bus) or ("bus", bus))
    assert nvml_handle_for(1) == ("bus", "00000000:3B:00.0")
    assert asked == ["00000000:3B:00.0"]


def test_handle_through_cuda_visible_devices(monkeypatch):
    FakeNvml().install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # never initialise CUDA to map
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda u: ("uuid", u))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_handle_for(0) == ("handle", 3)
    assert nvml_handle_for(1) == ("handle", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa-bbbb")
    assert nvml_handle_for(0) == ("uuid", "GPU-aaaa-bbbb")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_handle_for(2) == ("handle", 2)


# --- on a real GPU -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_nvml_handle_is_torchs_device():
    ok, reason = nvml_available()
    if not ok:
        pytest.skip(reason)
    torch.zeros(1, device="cuda:0")
    pynvml.nvmlInit()
    try:
        name = pynvml.nvmlDeviceGetName(nvml_handle_for(0))
    finally:
        pynvml.nvmlShutdown()
    assert (name.decode() if isinstance(name, bytes) else name) == torch.cuda.get_device_name(0)
