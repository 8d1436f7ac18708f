"""A stand-in for the NVML library (pynvml), for the GPU-measuring tests on a CPU machine."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pynvml
import torch

GiB = 1 << 30


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


def without_nvml(monkeypatch) -> None:
    """NVML's library is missing: nvmlInit raises."""
    def fail():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
