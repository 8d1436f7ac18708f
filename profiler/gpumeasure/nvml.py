"""GPU memory as the driver (NVML) sees it: whether NVML is there, the NVML handle of a torch
device, and a sampler that polls a device's used memory while a block runs.

NVML sees what the caching allocator does not (the CUDA context, fused-kernel workspaces,
allocator caching) but only by polling, so a short peak between two polls is missed; the
allocator's exact figure comes from the memory pass (allocator_pass.py). Both are kept.

NVML is optional: without it (no driver, CPU machine) every function here still runs
and says "no NVML: ..." instead of raising. Nothing here initialises CUDA. See docs/gpu.md.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a declared dependency
    pynvml = None  # type: ignore[assignment]

DEFAULT_INTERVAL_S = 0.005  # 5 ms poll: cheap for NVML, still misses peaks shorter than that
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
def nvml_session() -> Iterator[str]:
    """NVML initialised for the block (yields "") or not (yields "no NVML: <reason>")."""
    problem = _nvml_init()
    try:
        yield problem
    finally:
        if not problem:
            pynvml.nvmlShutdown()


def nvml_available() -> tuple[bool, str]:
    """(True, "NVML, driver <version>") when NVML initialises, else (False, "no NVML: <reason>")."""
    with nvml_session() as problem:
        if problem:
            return False, problem
        try:
            return True, f"NVML, driver {text(pynvml.nvmlSystemGetDriverVersion())}"
        except pynvml.NVMLError:
            return True, "NVML"


def text(value: Any) -> str:
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
    CUDA_DEVICE_ORDER=PCI_BUS_ID (devices.prefer_pci_bus_order, called by the sweep
    before any CUDA work).
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
