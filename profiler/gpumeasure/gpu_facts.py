"""A real GPU's facts (name, memory, compute capability, driver), asked without
initialising CUDA in this process.

NVML first: asking torch initialises CUDA, and a context held by the parent of a sweep
would sit in every worker's device-wide NVML figure (and poison fork: devices.py). torch
fills what NVML could not, from this process only if CUDA is initialised here already,
else from devices.py's throw-away probe process. measure/host.py puts these facts beside
the host's (CPU, RAM) in a run's environment and memory limit.
"""

from __future__ import annotations

import torch

from attnprof.profiler.gpumeasure import devices
from attnprof.profiler.gpumeasure.nvml import nvml_handle_for, nvml_session, pynvml, text


def fill_gpu_facts(env: dict, device: str, notes: list[str]) -> None:
    """Set ``env``'s driver, device_name, device_memory_bytes and compute_capability for
    CUDA ``device``; what cannot be learnt stays as it was and a line in ``notes`` says why."""
    index = torch.device(device).index or 0
    with nvml_session() as problem:
        notes += [problem] if problem else []
        try:
            if not problem:
                env["driver"] = text(pynvml.nvmlSystemGetDriverVersion())
                handle = nvml_handle_for(index)
                env["device_name"] = text(pynvml.nvmlDeviceGetName(handle))
                env["device_memory_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
                env["compute_capability"] = "{}.{}".format(*pynvml.nvmlDeviceGetCudaComputeCapability(handle))
        except pynvml.NVMLError as exc:
            notes.append(f"NVML: {exc}")
    if env["device_name"] is None or env["compute_capability"] is None:
        facts = torch_facts(index)
        if not facts:
            notes.append(f"no CUDA device: {devices.probe().get('error') or f'no cuda:{index}'}")
            return
        env["device_name"] = env["device_name"] or facts["name"]
        env["device_memory_bytes"] = env["device_memory_bytes"] or facts["total_memory_bytes"]
        env["compute_capability"] = env["compute_capability"] or facts["capability"]


def torch_facts(index: int) -> dict:
    """torch's view of a device: from this process if CUDA is initialised here, else from
    a throw-away probe process (asking here would poison fork: gpumeasure/devices.py)."""
    if torch.cuda.is_initialized():
        try:
            props = torch.cuda.get_device_properties(index)
        except Exception:  # noqa: BLE001 - bad index
            return {}
        return {"name": props.name, "total_memory_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}"}
    return devices.device_facts(index)


def gpu_memory_bytes(device: str) -> int:
    """The total memory of CUDA ``device``: NVML's figure (which initialises no CUDA, so a
    parent that only plans and spawns workers can still fork), else torch's (torch_facts).
    RuntimeError when neither can tell."""
    index = torch.device(device).index or 0  # not current_device(): that would initialise CUDA
    with nvml_session() as problem:
        try:
            if not problem:
                return int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle_for(index)).total)
        except pynvml.NVMLError:
            pass  # torch below
    total = torch_facts(index).get("total_memory_bytes")
    if not total:
        raise RuntimeError(f"cannot read the memory of {device}: no NVML and no CUDA "
                           f"({devices.probe().get('error') or 'no such device'})")
    return int(total)
