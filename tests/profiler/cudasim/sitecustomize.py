"""Simulates a CUDA build of torch on this CPU build, in every Python process started
with this folder on PYTHONPATH (tests/profiler/test_no_cuda_before_fork.py).

On a CUDA build ``torch.cuda.is_available()`` and ``torch.cuda.device_count()`` (when
NVML cannot answer) call ``torch._C._cuda_getDeviceCount()``, which calls
``poison_fork()`` (torch/csrc/cuda/Module.cpp): a child forked afterwards cannot use
CUDA. Here the compiled flag is forced on, and the device-count and CUDA-init functions
mark the process instead of poisoning it. A fork (``os.register_at_fork``) from a marked
process appends one line, with the stack that marked it, to ATTNPROF_FORK_SIM_LOG.
The simulated build has no device (count 0), so everything still runs on the CPU.
"""

import os
import traceback

_LOG = os.environ.get("ATTNPROF_FORK_SIM_LOG")

if _LOG:
    import torch

    _marked: list = []  # the stack of the first call that would have poisoned fork

    def _mark(what: str) -> None:
        if not _marked:
            _marked.append(f"{what} in pid {os.getpid()}:\n" + "".join(traceback.format_stack(limit=25)[:-2]))

    def _device_count() -> int:
        _mark("torch._C._cuda_getDeviceCount")
        return 0

    def _cuda_init() -> None:
        _mark("torch._C._cuda_init")
        raise RuntimeError("simulated CUDA build: no device")

    def _before_fork() -> None:
        if _marked:
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"=== pid {os.getpid()} forked after {_marked[0]}\n")

    torch.cuda._is_compiled = lambda: True
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):  # imported by torch._dynamo on a CUDA build
        torch._C._cuda_getCurrentRawStream = lambda device: 0
    torch._C._cuda_getDeviceCount = _device_count
    torch._C._cuda_init = _cuda_init
    os.register_at_fork(before=_before_fork)
