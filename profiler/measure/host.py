"""What ran the points: the host's CPU model and RAM, and a sweep's default memory limit.

A CUDA device's own facts come from ``profiler.gpumeasure.gpu_facts`` (NVML first, no
CUDA initialised here); this module puts them beside the host's. Never raises where a
manifest is being written: a missing piece is None and ``note`` says why.
"""

from __future__ import annotations

import os
import platform
from typing import Optional

import psutil

CPU_LIMIT_FRACTION = 0.8  # leave 20% of available RAM to the OS and the parent process


def cpu_model() -> Optional[str]:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` says, else None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def device_environment(device: str) -> dict:
    """What ran the points: host CPU and RAM always; for CUDA also GPU name, memory, CUDA, driver."""
    notes: list[str] = []
    env: dict = {"device_name": "cpu", "device_memory_bytes": None, "cuda": None,
                 "driver": None, "compute_capability": None, "cpu": cpu_model(), "logical_cores": os.cpu_count(),
                 "ram_bytes": None}
    try:
        env["ram_bytes"] = int(psutil.virtual_memory().total)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"no RAM figure: {exc}")
    if str(device).startswith("cuda"):
        import torch

        from attnprof.profiler.gpumeasure.gpu_facts import fill_gpu_facts

        env.update(device_name=None, cuda=torch.version.cuda)
        try:
            fill_gpu_facts(env, device, notes)
        except Exception as exc:  # noqa: BLE001 - never raise from here
            notes.append(f"GPU facts incomplete: {exc}")
    env["note"] = "; ".join(notes)
    return env


def default_memory_limit_bytes(device: str) -> int:
    """The memory a sweep may plan for: 80% of available RAM, or the GPU's total memory
    (``gpu_facts.gpu_memory_bytes``: NVML first, so a parent that plans keeps no CUDA context)."""
    if not str(device).startswith("cuda"):
        return int(CPU_LIMIT_FRACTION * psutil.virtual_memory().available)
    from attnprof.profiler.gpumeasure.gpu_facts import gpu_memory_bytes

    return gpu_memory_bytes(device)
