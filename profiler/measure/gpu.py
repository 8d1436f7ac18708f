"""GPU memory as the allocator and the driver (NVML) see it, and the device's environment.

The caching allocator's ``max_memory_allocated`` is exact and is the figure a point
records (``measured_by="cuda-allocator"``). NVML sees what the allocator does not
(the CUDA context, fused-kernel workspaces, allocator caching) but only by polling, so
a short peak between two polls is missed. Both are kept; neither replaces the other.

NVML is optional: without it (no driver, CPU machine) every function here still runs
and says "no NVML: ..." instead of raising. See docs/gpu.md and ../shared/NOTES.md.
"""

from __future__ import annotations

import os
import platform
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import psutil
import torch

from attnprof.profiler.measure import devices
from attnprof.profiler.measure.timing import cpu_time, cuda_time, summarize  # noqa: F401  (re-exported)

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a declared dependency
    pynvml = None  # type: ignore[assignment]

DEFAULT_INTERVAL_S = 0.005  # 5 ms poll: cheap for NVML, still misses peaks shorter than that
CPU_LIMIT_FRACTION = 0.8  # leave 20% of available RAM to the OS and the parent process
NO_PID_MATCH = "per-process figure unavailable: PID namespace"



def _nvml_init() -> str:
    """Initialise NVML (pair with ``nvmlShutdown``): "" on success, else "no NVML: <reason>"."""
    if pynvml is None:
        return "no NVML: pynvml not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        return f"no NVML: {str(exc) or type(exc).__name__}"
    return ""


@contextmanager
def _nvml_session() -> Iterator[str]:
    """NVML initialised for the block (yields "") or not (yields "no NVML: <reason>")."""
    problem = _nvml_init()
    try:
        yield problem
    finally:
        if not problem:
            pynvml.nvmlShutdown()


def nvml_available() -> tuple[bool, str]:
    """(True, "NVML, driver <version>") when NVML initialises, else (False, "no NVML: <reason>")."""
    with _nvml_session() as problem:
        if problem:
            return False, problem
        try:
            return True, f"NVML, driver {_text(pynvml.nvmlSystemGetDriverVersion())}"
        except pynvml.NVMLError:
            return True, "NVML"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _torch_pci_bus_id(torch_index: int) -> Optional[str]:
    """The device's PCI bus id as NVML spells it, without initialising CUDA to learn it."""
    if not torch.cuda.is_initialized():
        return None
    try:
        props = torch.cuda.get_device_properties(torch_index)
    except Exception:  # noqa: BLE001 - no CUDA, bad index: fall back to the index
        return None
    bus = getattr(props, "pci_bus_id", None)
    if isinstance(bus, str):
        return bus
    if isinstance(bus, int):  # torch >= 2.6 exposes domain/bus/device as ints
        domain, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        return f"{domain:08X}:{bus:02X}:{dev:02X}.0"
    return None


def nvml_handle_for(torch_index: int):
    """The NVML handle of torch's ``cuda:<torch_index>`` (NVML must be initialised).

    By PCI bus id where torch can tell it; otherwise through CUDA_VISIBLE_DEVICES
    (indices or GPU-UUIDs) and the index, which agrees with torch only under
    CUDA_DEVICE_ORDER=PCI_BUS_ID (set above unless the user chose otherwise).
    """
    bus = _torch_pci_bus_id(torch_index)
    if bus is not None:
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except pynvml.NVMLError:
            pass  # e.g. a bus-id spelling this driver rejects: fall back to the index
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if torch_index < len(visible):
        entry = visible[torch_index]
        if entry.startswith("GPU-"):
            return pynvml.nvmlDeviceGetHandleByUUID(entry)
        if entry.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByIndex(torch_index)


class NvmlSampler:
    """Polls NVML in a background thread while a block runs: device-wide and own-process used bytes.

    The first sample, taken on enter, is the baseline (CUDA context plus whatever was
    already allocated); the last is taken on exit, so a peak still held at the end of
    the block is never missed. Anything in between is only seen at poll instants.
    Without NVML the sampler is a no-op: peaks stay None and ``note`` says why.
    """

    def __init__(self, device_index: int = 0, interval_s: float = DEFAULT_INTERVAL_S,
                 pid: Optional[int] = None):
        self.device_index = device_index
        self.interval_s = interval_s
        self.pid = os.getpid() if pid is None else pid
        self.baseline_device_bytes: Optional[int] = None
        self.baseline_process_bytes: Optional[int] = None
        self.peak_device_bytes: Optional[int] = None
        self.peak_process_bytes: Optional[int] = None
        self.samples = 0
        self.note = ""
        self._handle: Any = None
        self._active = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error = ""  # the NVML failure that ended sampling early
        self._process_notes: dict[str, int] = {}  # why the per-process figure was a fallback or missing -> samples

    def __enter__(self) -> "NvmlSampler":
        self.note = _nvml_init()
        if self.note:
            return self
        try:
            self._handle = nvml_handle_for(self.device_index)
            self._sample()
        except pynvml.NVMLError as exc:
            self.note = f"no NVML for cuda:{self.device_index}: {exc}"
            pynvml.nvmlShutdown()
            return self
        self._active = True
        self._thread = threading.Thread(target=self._poll, name="attnprof-nvml", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> bool:
        if not self._active:
            return False
        self._active = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self._error:
            try:
                self._sample()  # the final sample: a peak still held at exit is caught here
            except pynvml.NVMLError as exc:
                self._error = f"NVML failed at exit after {self.samples} samples: {exc}"
        pynvml.nvmlShutdown()
        notes = [self._error] if self._error else []
        for why, count in self._process_notes.items():
            notes.append(why if count == self.samples else f"{why} ({count} of {self.samples} samples)")
        self.note = "; ".join(notes)
        return False  # never swallow the block's exception

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except pynvml.NVMLError as exc:
                self._error = f"NVML failed mid-run after {self.samples} samples: {exc}"
                return

    def _sample(self) -> None:
        used = int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        mine = self._process_bytes()
        if self.samples == 0:
            self.baseline_device_bytes, self.baseline_process_bytes = used, mine
        self.peak_device_bytes = max(self.peak_device_bytes or 0, used)
        if mine is not None:
            self.peak_process_bytes = max(self.peak_process_bytes or 0, mine)
        self.samples += 1

    def _process_bytes(self) -> Optional[int]:
        """This process's used bytes; inside a container NVML may list host PIDs instead of ours."""
        why = ""
        try:
            procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle))
        except pynvml.NVMLError as exc:
            procs, why = [], f"per-process figure unavailable: {exc}"
        chosen = [p for p in procs if p.pid == self.pid]
        if not chosen and len(procs) == 1:
            chosen = procs
            why = f"per-process figure from the only process listed (pid {procs[0].pid}, ours not listed: PID namespace)"
        used = chosen[0].usedGpuMemory if chosen else None
        if not why and not chosen:
            why = NO_PID_MATCH
        elif not why and used is None:  # NVML_VALUE_NOT_AVAILABLE: no permission, WDDM
            why = "per-process figure unavailable: NVML reports no usedGpuMemory"
        if why:
            self._process_notes[why] = self._process_notes.get(why, 0) + 1
        return None if used is None else int(used)


def _cuda_index(device: Any) -> int:
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dev.type != "cuda":
        raise ValueError(f"not a CUDA device: {device!r}")
    return dev.index if dev.index is not None else torch.cuda.current_device()


def cuda_memory_pass(step: Callable[[], None], device: Any) -> dict:
    """Run ``step`` once and return its allocator and NVML memory figures (PointRecord fields).

    The allocator cache is emptied and its peak reset first, so the peak is this
    step's alone. We synchronize inside the sampler: kernels run asynchronously, and
    the sampler must still be polling while they do. An exception in ``step`` (a
    CUDA OOM) propagates after the sampler has stopped; the caller records it.
    """
    index = _cuda_index(device)
    torch.cuda.synchronize(index)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(index)
    with NvmlSampler(index) as sampler:
        step()
        torch.cuda.synchronize(index)
    baseline, note = sampler.baseline_process_bytes, sampler.note
    if baseline is None and sampler.baseline_device_bytes is not None:
        baseline = sampler.baseline_device_bytes
        note = "; ".join(filter(None, [note, "baseline is device-wide"]))
    return {
        "measured_peak_bytes": int(torch.cuda.max_memory_allocated(index)),
        "cuda_reserved_peak_bytes": int(torch.cuda.max_memory_reserved(index)),
        "nvml_device_peak_bytes": sampler.peak_device_bytes,
        "nvml_process_peak_bytes": sampler.peak_process_bytes,
        "nvml_baseline_bytes": baseline,
        "nvml_note": note,
    }


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def device_environment(device: str) -> dict:
    """What ran the points: host CPU and RAM always; for CUDA also GPU name, memory, CUDA, driver.

    GPU facts come from NVML first: asking torch initialises CUDA, and a context held
    by the parent of a sweep would sit in every worker's device-wide NVML figure.
    torch fills what NVML could not. Never raises: a missing piece is None and
    ``note`` says why, so a manifest is always written.
    """
    notes: list[str] = []
    env: dict = {"device_name": "cpu", "device_memory_bytes": None, "cuda": None,
                 "driver": None, "compute_capability": None, "cpu": _cpu_model(), "logical_cores": os.cpu_count(),
                 "ram_bytes": None}
    try:
        env["ram_bytes"] = int(psutil.virtual_memory().total)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"no RAM figure: {exc}")
    if str(device).startswith("cuda"):
        env.update(device_name=None, cuda=torch.version.cuda)
        try:
            _gpu_facts(env, device, notes)
        except Exception as exc:  # noqa: BLE001 - never raise from here
            notes.append(f"GPU facts incomplete: {exc}")
    env["note"] = "; ".join(notes)
    return env


def _gpu_facts(env: dict, device: str, notes: list[str]) -> None:
    index = torch.device(device).index or 0
    with _nvml_session() as problem:
        notes += [problem] if problem else []
        try:
            if not problem:
                env["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
                handle = nvml_handle_for(index)
                env["device_name"] = _text(pynvml.nvmlDeviceGetName(handle))
                env["device_memory_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
                env["compute_capability"] = "{}.{}".format(*pynvml.nvmlDeviceGetCudaComputeCapability(handle))
        except pynvml.NVMLError as exc:
            notes.append(f"NVML: {exc}")
    if env["device_name"] is None or env["compute_capability"] is None:
        facts = _torch_facts(index)
        if not facts:
            notes.append(f"no CUDA device: {devices.probe().get('error') or f'no cuda:{index}'}")
            return
        env["device_name"] = env["device_name"] or facts["name"]
        env["device_memory_bytes"] = env["device_memory_bytes"] or facts["total_memory_bytes"]
        env["compute_capability"] = env["compute_capability"] or facts["capability"]


def _torch_facts(index: int) -> dict:
    """torch's view of a device: from this process if CUDA is initialised here, else from
    a throw-away probe process (asking here would poison fork: measure/devices.py)."""
    if torch.cuda.is_initialized():
        try:
            props = torch.cuda.get_device_properties(index)
        except Exception:  # noqa: BLE001 - bad index
            return {}
        return {"name": props.name, "total_memory_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}"}
    return devices.device_facts(index)


def default_memory_limit_bytes(device: str) -> int:
    """The memory a sweep may plan for: 80% of available RAM, or the GPU's total memory.

    For a GPU, NVML is asked first: it does not initialise CUDA, so a parent process
    that only plans and spawns workers keeps no CUDA context and can still fork. torch is
    the fallback, asked in a throw-away process unless CUDA is initialised here already.
    """
    if not str(device).startswith("cuda"):
        return int(CPU_LIMIT_FRACTION * psutil.virtual_memory().available)
    index = torch.device(device).index or 0  # not current_device(): that would initialise CUDA
    with _nvml_session() as problem:
        try:
            if not problem:
                return int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle_for(index)).total)
        except pynvml.NVMLError:
            pass  # torch below
    total = _torch_facts(index).get("total_memory_bytes")
    if not total:
        raise RuntimeError(f"cannot read the memory of {device}: no NVML and no CUDA "
                           f"({devices.probe().get('error') or 'no such device'})")
    return int(total)
