"""Simulates a CUDA build of torch on this CPU build, in every Python process started
with this folder on PYTHONPATH (tests/profiler/test_no_cuda_before_fork.py).

On a CUDA build ``torch.cuda.is_available()`` and ``torch.cuda.device_count()`` (when
NVML cannot answer) call ``torch._C._cuda_getDeviceCount()``, which calls
``poison_fork()`` (torch/csrc/cuda/Module.cpp): a child forked afterwards cannot use
CUDA. Here the compiled flag is forced on, and the device-count and CUDA-init functions
mark the process instead of poisoning it. A fork (``os.register_at_fork``) from a marked
process appends one line, with the stack that marked it, to ATTNPROF_FORK_SIM_LOG.
The simulated build has no device (count 0), so everything still runs on the CPU.

ATTNPROF_SIM_DRIVER_THREAD simulates what the first real GPU showed (torch 2.11.0+cu130 on an
H200): something inside torch's C++ starts the CUDA driver, which leaves a thread running, and a
child forked afterwards fails at its first CUDA use ("CUDA error: initialization error").
``fake``: the driver starts at a process's first FakeTensorMode (as it did there, in the warm
helper's fake-tensor warm-up; attnprof's own fake mode no longer starts it, test_no_driver_before_fork.py,
so this is now the worst case the thread rule must survive); ``start``: at interpreter start, in every process (some unknown
step started it). The driver is a real OS thread named ``cuda-EvtHandlr`` (it counts in
/proc/self/status); a child forked from a process that runs it logs and raises at its first
fake-tensor run or backward (where the real one failed).
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

    _DRIVER = os.environ.get("ATTNPROF_SIM_DRIVER_THREAD", "")
    _driver: list = []  # the pid whose driver thread runs; survives fork, as the driver's state does

    def _driver_thread() -> None:
        import ctypes

        ctypes.CDLL(None).prctl(15, b"cuda-EvtHandlr", 0, 0, 0)  # PR_SET_NAME
        threading.Event().wait()

    def _use_cuda(what: str) -> None:
        """The driver, as a CUDA call finds it: started here, or broken in a forked child."""
        if _driver and _driver[0] != os.getpid():
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"=== pid {os.getpid()} used CUDA ({what}) in a child forked after the driver started "
                          f"in pid {_driver[0]}\n")
            raise RuntimeError("CUDA error: initialization error (simulated: forked after the driver started)")
        if not _driver:
            _driver.append(os.getpid())
            threading.Thread(target=_driver_thread, daemon=True).start()

    import threading

    if _DRIVER:
        from torch._subclasses.fake_tensor import FakeTensorMode

        _real_enter = FakeTensorMode.__enter__

        def _enter(self):
            _use_cuda("FakeTensorMode")
            return _real_enter(self)

        FakeTensorMode.__enter__ = _enter
        if _DRIVER == "start":
            _use_cuda("start")

    torch.cuda._is_compiled = lambda: True
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):  # imported by torch._dynamo on a CUDA build
        torch._C._cuda_getCurrentRawStream = lambda device: 0
    torch._C._cuda_getDeviceCount = _device_count
    torch._C._cuda_init = _cuda_init
    os.register_at_fork(before=_before_fork)

    # --- autograd's device threads (torch/csrc/autograd/engine.cpp) ----------------------------
    # On a CUDA build a process's first backward starts threads named pt_autograd_<i>; a child
    # forked afterwards raises at its first backward. Simulated: a sleeping thread given that
    # OS name (what profiler/forks.py reads), and the raise in a child of a process that had one.
    import ctypes
    import threading

    import torch.autograd
    import torch.autograd.graph

    _autograd_started: list = []  # survives fork, as torch's atfork flag does
    _real_run_backward = torch.autograd.graph._engine_run_backward

    def _autograd_thread() -> None:
        ctypes.CDLL(None).prctl(15, b"pt_autograd_0", 0, 0, 0)  # PR_SET_NAME
        threading.Event().wait()

    def _run_backward(*args, **kwargs):
        if _DRIVER:
            _use_cuda("backward")
        if _autograd_started and _autograd_started[0] != os.getpid():
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"=== pid {os.getpid()} ran backward in a child forked after autograd's threads started "
                          f"in pid {_autograd_started[0]}\n")
            raise RuntimeError("Unable to handle autograd's threading in combination with fork-based "
                               "multiprocessing (simulated)")
        if not _autograd_started:
            _autograd_started.append(os.getpid())
            threading.Thread(target=_autograd_thread, daemon=True).start()
        return _real_run_backward(*args, **kwargs)

    torch.autograd.graph._engine_run_backward = _run_backward
    torch.autograd._engine_run_backward = _run_backward
