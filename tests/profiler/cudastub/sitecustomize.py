"""Loaded in every Python process started with this folder on PYTHONPATH and the driver stub
(libcuda_stub.c, built by tests/profiler/test_no_driver_before_fork.py) on LD_LIBRARY_PATH.

It loads the stub by its path before anything else can (so the CUDA runtime's later
``dlopen("libcuda.so.1")`` finds this one), hands the stub's SIGUSR2 to faulthandler (the
Python stack of a process's first driver call goes to the log), and, before every
``os.fork`` (multiprocessing's included), appends one line to the log when this process has
called the driver: on a GPU such a child fails at its first CUDA use. A fork by
``profiler.forks.probe_fork`` is no such child (it exits at once, running nothing) and is
not logged. With ``ATTNPROF_DRIVER_STUB_FORKS`` set, every other fork also appends one line
there, driver call or not, so a test can tell "forked, and safely" from "never forked".
"""

import os
import traceback

_LOG = os.environ.get("ATTNPROF_DRIVER_STUB_LOG")
_STUB = os.environ.get("ATTNPROF_DRIVER_STUB")
_FORKS = os.environ.get("ATTNPROF_DRIVER_STUB_FORKS")

if _LOG and _STUB:
    import ctypes
    import faulthandler
    import signal

    _lib = ctypes.CDLL(_STUB, mode=ctypes.RTLD_GLOBAL)
    _lib.attnprof_stub_calls.restype = ctypes.c_int
    _stacks = open(_LOG, "a", encoding="utf-8")  # kept open: faulthandler writes to its descriptor
    faulthandler.register(signal.SIGUSR2, file=_stacks, all_threads=False)

    def _before_fork() -> None:
        if traceback.extract_stack(limit=2)[0].name == "probe_fork":  # a probe's child runs nothing
            return
        made = _lib.attnprof_stub_calls()
        if _FORKS:
            with open(_FORKS, "a", encoding="utf-8") as forks:
                forks.write(f"pid {os.getpid()} forks after {made} driver call(s)\n")
        if made:
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"=== pid {os.getpid()} forks after {made} CUDA driver call(s) (above), from:\n"
                          + "".join(traceback.format_stack(limit=12)[:-1]))

    os.register_at_fork(before=_before_fork)
