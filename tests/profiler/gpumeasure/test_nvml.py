"""profiler/measure/gpu.py and profiler/measure/timing.py: NVML sampling, allocator figures, timing, environment.

Runs on a CPU-only machine: NVML and torch.cuda are replaced by fakes. The tests at the
end (marked ``gpu``) use the real device and are skipped without one.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import fields
from types import SimpleNamespace

import pynvml
import pytest
import torch

from attnprof.profiler.measure import gpu
from attnprof.profiler.measure.gpu import (NO_PID_MATCH, NvmlSampler, cuda_memory_pass, default_memory_limit_bytes,
                                   device_environment, nvml_available, nvml_handle_for)
from attnprof.profiler.records import PointRecord
from attnprof.profiler.measure.timing import cpu_time, cuda_time, is_noisy, summarize

MiB = 1 << 20
GiB = 1 << 30
MEMORY_KEYS = {"measured_peak_bytes", "cuda_reserved_peak_bytes", "nvml_device_peak_bytes",
               "nvml_process_peak_bytes", "nvml_baseline_bytes", "nvml_note"}


def proc(pid: int, used) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


class FakeNvml:
    """Stands in for the NVML library: ``used`` is the device-wide sequence (the last value
    repeats once it runs out), ``procs`` the process list (or a callable of the sample index),
    ``fail_at`` the memory-info call that raises."""

    def __init__(self, used=(GiB,), procs=(), fail_at=None, total=141 * GiB):
        self.used, self.procs, self.fail_at, self.total = list(used), procs, fail_at, total
        self.calls = 0
        self.inits = 0
        self.failed = threading.Event()
        self.lock = threading.Lock()

    def install(self, monkeypatch) -> "FakeNvml":
        for name, fn in (("nvmlInit", self.init), ("nvmlShutdown", self.shutdown),
                         ("nvmlDeviceGetHandleByIndex", lambda i: ("handle", i)),
                         ("nvmlDeviceGetMemoryInfo", self.memory_info),
                         ("nvmlDeviceGetComputeRunningProcesses", self.processes),
                         ("nvmlSystemGetDriverVersion", lambda: "570.86.15"),
                         ("nvmlDeviceGetName", lambda h: "NVIDIA H200"),
                         ("nvmlDeviceGetCudaComputeCapability", lambda h: (9, 0))):
            monkeypatch.setattr(pynvml, name, fn)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        # On a GPU machine CUDA may be live: keep torch out of the handle lookup here.
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
        return self

    def init(self):
        self.inits += 1

    def shutdown(self):
        self.inits -= 1

    def memory_info(self, handle):
        with self.lock:
            index = self.calls
            self.calls += 1
        if self.fail_at is not None and index >= self.fail_at:
            self.failed.set()
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(used=self.used[min(index, len(self.used) - 1)], total=self.total)

    def processes(self, handle):
        return self.procs(self.calls) if callable(self.procs) else list(self.procs)

    def wait_for(self, condition, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert condition(), "the sampler thread did not poll in time"


@pytest.fixture
def no_nvml(monkeypatch):
    def fail():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", fail)


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


def test_pci_bus_order_is_the_default_and_a_user_choice_is_kept(monkeypatch):
    from attnprof.profiler.gpumeasure import devices

    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    devices.prefer_pci_bus_order()
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    devices.prefer_pci_bus_order()
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


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


# --- timing --------------------------------------------------------------------------------
def test_cpu_time_returns_one_sample_per_repeat_after_warmup():
    counts = {"fwd": 0, "bwd": 0}

    def forward():
        counts["fwd"] += 1
        return torch.ones(4, requires_grad=True).sum()

    def backward(loss):
        counts["bwd"] += 1
        loss.backward()

    fwd, bwd = cpu_time(forward, backward, warmup=2, repeats=5)
    assert len(fwd) == len(bwd) == 5
    assert all(t >= 0 for t in fwd + bwd)
    assert counts == {"fwd": 7, "bwd": 7}


def test_cpu_time_forward_only_has_no_backward_samples():
    fwd, bwd = cpu_time(lambda: None, None, warmup=0, repeats=3)
    assert len(fwd) == 3 and bwd == []


def test_timers_reject_no_repeats():
    with pytest.raises(ValueError):
        cpu_time(lambda: None, None, warmup=0, repeats=0)


def test_summarize_median_and_iqr():
    assert summarize([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 2.0)  # quartiles 2 and 4
    assert summarize([1.0, 2.0, 3.0, 4.0]) == (2.5, 1.5)  # 1.75 .. 3.25
    assert summarize([7.0]) == (7.0, 0.0)
    assert summarize([]) == (None, None)


def test_noisy_flag_above_a_tenth():
    assert not is_noisy(*summarize([10.0, 10.1, 10.2, 10.3]))
    assert is_noisy(*summarize([10.0, 12.0, 14.0, 16.0]))
    assert not is_noisy(None, None)


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
    monkeypatch.setattr(gpu.psutil, "virtual_memory", lambda: SimpleNamespace(available=10 * GiB, total=16 * GiB))
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
    env = device_environment("cuda:0")
    assert env["device_name"] == torch.cuda.get_device_name(0) and env["driver"], env


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_time_is_sane():
    a = torch.randn(4096, 4096, device="cuda", requires_grad=True)

    def forward():
        return (a @ a).square().mean()

    def backward(loss):
        loss.backward()
        a.grad = None

    fwd, bwd = cuda_time(forward, backward, warmup=2, repeats=5, device="cuda")
    print(fwd, bwd)
    assert len(fwd) == len(bwd) == 5
    assert all(0 < t < 10_000 for t in fwd + bwd)
    median_fwd, _ = summarize(fwd)
    assert median_fwd < summarize(bwd)[0] * 5  # backward does ~2x forward's matmuls
