"""Which CUDA devices there are, asked without initialising CUDA in this process.

A process that forks children which may use CUDA must not initialise CUDA, nor even ask
torch for the device count: on a CUDA build ``torch.cuda.is_available()`` (and
``device_count()`` when NVML cannot answer) calls ``torch._C._cuda_getDeviceCount()``,
which calls ``poison_fork()`` (torch/csrc/cuda/Module.cpp), and every child forked
afterwards raises "Cannot re-initialize CUDA in forked subprocess" at its first CUDA
tensor. The sweep's main process forks prediction workers; so does ``predict``.

So this module answers from, in order: nothing (a CPU build of torch has no CUDA); this
process (if CUDA is initialised here already, asking costs nothing more); NVML, through
torch's own NVML count (which honours CUDA_VISIBLE_DEVICES, indices, UUIDs and MIG,
and poisons nothing); and otherwise a throw-away Python process (``python -m
attnprof.profiler.gpumeasure.devices``) that asks torch and prints JSON. Answers are kept
per CUDA_VISIBLE_DEVICES value. tests/profiler/test_no_cuda_before_fork.py checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Optional

from attnprof.profiler.forks import cuda_compiled  # noqa: F401  (devices.cuda_compiled: the same question)

PROBE_TIMEOUT_S = 120.0  # importing torch on a cold, loaded machine, plus CUDA's start
_answers: dict = {}  # CUDA_VISIBLE_DEVICES -> probe answer


def prefer_pci_bus_order(env: Optional[dict] = None) -> None:
    """torch numbers GPUs fastest-first by default, NVML and nvidia-smi by PCI bus: make
    them agree. Call before any CUDA work in a process (or on a child's environment);
    a user's own choice is kept."""
    (os.environ if env is None else env).setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def device_count() -> int:
    """CUDA devices this process would see, without initialising CUDA or poisoning fork."""
    import torch

    if not cuda_compiled():
        return 0
    if torch.cuda.is_initialized():
        return torch.cuda.device_count()
    nvml_count = getattr(torch.cuda, "_device_count_nvml", None)
    if nvml_count is not None:
        try:
            count = int(nvml_count())
        except Exception:  # noqa: BLE001 - a torch whose helper breaks: ask a child
            count = -1
        if count >= 0:
            return count
    return int(probe().get("count") or 0)


def cuda_available() -> bool:
    return device_count() > 0


def probe() -> dict:
    """What a fresh process's torch says of CUDA (count, devices, versions); never raises:
    a failed probe is {"count": 0, "error": why}."""
    key = os.environ.get("CUDA_VISIBLE_DEVICES")
    if key not in _answers:
        env = dict(os.environ)
        prefer_pci_bus_order(env)
        try:
            done = subprocess.run([sys.executable, "-m", __name__], capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
            answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
            if not isinstance(answer, dict):
                answer = {"count": 0, "error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            answer = {"count": 0, "error": f"the CUDA probe failed: {exc}"}
        _answers[key] = answer
    return _answers[key]


def forget_answers() -> None:
    """Drop the kept probe answers: the next ``probe`` asks a fresh process again."""
    _answers.clear()


def device_facts(index: int = 0) -> dict:
    """name, total_memory_bytes, capability ("9.0") and pci_bus_id of visible device
    ``index`` (from the probe; {} when there is none)."""
    devices = probe().get("devices") or []
    return devices[index] if 0 <= index < len(devices) else {}


def _ask_torch() -> dict:
    """Run in the probe process only: it initialises CUDA, then exits."""
    import torch

    answer: dict = {"count": 0, "devices": [], "torch": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": None}
    try:
        answer["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        pass
    try:
        answer["count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for i in range(answer["count"]):
            props = torch.cuda.get_device_properties(i)
            answer["devices"].append({"name": props.name, "total_memory_bytes": int(props.total_memory),
                                      "capability": f"{props.major}.{props.minor}",
                                      "sm_count": int(getattr(props, "multi_processor_count", 0) or 0)})
    except Exception as exc:  # noqa: BLE001 - a broken driver is an answer too
        answer["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return answer


if __name__ == "__main__":
    print(json.dumps(_ask_torch()))
