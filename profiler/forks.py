"""Worker processes forked from a process that may have run real torch ops.

Predictions fork workers from a warm process (torch imported, nothing to re-import). A
small point is predicted by a real CPU run (predict/fake_run.small_point), and a real
op on several threads starts OpenMP's thread pool (GNU libgomp, MKL's batched GEMM on
top of it). The pool does not survive fork: a child's first parallel region then waits
for threads that do not exist, forever (measured: a bmm in gomp_team_barrier_wait_end).
So every forked worker runs single-threaded, set before it runs anything
(tests/profiler/measure/test_small_points.py::test_small_points_in_forked_workers_do_not_hang).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from typing import Optional


def cuda_compiled() -> bool:
    """Whether this torch is a CUDA build (asks no device: nothing here poisons fork)."""
    import torch

    return bool(torch.cuda._is_compiled())


@contextlib.contextmanager
def checkpoints_ask_no_device():
    """While entered, a non-reentrant ``torch.utils.checkpoint`` whose arguments are all CPU tensors
    (every CPU run and fake trace of attnprof's) takes "cpu" as its device type without asking
    for the accelerator. Unset, ``DefaultDeviceType.get_device_type()`` (torch/utils/checkpoint.py,
    ``_infer_device_type``: torch 2.11 and 2.13 alike) calls
    ``torch.accelerator.current_accelerator(True)``: on a CUDA build ``torch.cuda.is_available()``,
    ``torch._C._cuda_getDeviceCount()``, which poisons fork and starts the driver in a process that
    was only predicting (seen on torch 2.11.0+cu130 without a GPU, tests/profiler/
    test_no_cuda_before_fork.py). For CPU tensors the two device types run alike (no CUDA state to
    stash, CUDA's autocast not theirs); arguments on a GPU still give "cuda". A device type set
    before (by the user, or cached by torch) is kept; the unset one is put back on exit. The field
    is torch's, the process's: attnprof runs one step at a time per process."""
    from torch.utils.checkpoint import DefaultDeviceType

    before = getattr(DefaultDeviceType, "_default_device_type", None)  # torch's own field: None or "" while unset
    if not before:
        DefaultDeviceType.set_device_type("cpu")
    try:
        yield
    finally:
        if not before:
            DefaultDeviceType._default_device_type = before


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def single_threaded() -> None:
    """Initializer of a forked worker: one intra-op thread (see the module docstring)."""
    import torch

    torch.set_num_threads(1)


def worker_lifeline(parent: int) -> None:
    """First thing in a forked worker: it dies with ``parent`` (SIGKILL included: the
    kernel's parent-death signal, profiler/lifeline.py), ignores Ctrl-C (the parent decides)
    and takes SIGTERM's default back (the parent's handler raises KeyboardInterrupt, which
    in a worker would only print a traceback)."""
    import signal

    from attnprof.profiler.lifeline import die_with_parent

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _pool_worker(parent: int) -> None:
    worker_lifeline(parent)
    single_threaded()


def fork_pool(workers: int):
    """A multiprocessing Pool of forked, single-threaded workers that die with this process."""
    return mp.get_context("fork").Pool(workers, initializer=_pool_worker, initargs=(os.getpid(),))


# --- autograd's device threads and fork ------------------------------------------------------
# On a CUDA build of torch, the first backward of a process starts autograd's device threads
# (torch/csrc/autograd/engine.cpp ``start_device_threads``: one per device of every non-CPU
# device type, named ``pt_autograd_<i>``; a GPU machine, or the no-op CUDA guard a fake mode
# installs on a CUDA build without a GPU) and registers a fork handler: any child forked
# afterwards raises "Unable to handle autograd's threading in combination with fork-based
# multiprocessing" at its first backward. Measured with torch 2.11.0+cu130 on a CPU machine:
# one fake prediction starts 8 such threads. So a process forks children that predict or
# measure only while those threads are not running (``autograd_fork_safe``), and on a CUDA
# build forks them before its own first backward (predict/pool.py, runner/preload.py).
AUTOGRAD_THREAD = "pt_autograd_"


def autograd_threads_running() -> bool:
    """Whether autograd's device threads run in this process (read off /proc: the threads'
    names); off Linux, whether this torch could have started them (a CUDA build)."""
    import glob

    names = glob.glob(f"/proc/{os.getpid()}/task/*/comm")
    if not names:
        return cuda_compiled()
    for path in names:
        try:
            with open(path, encoding="ascii", errors="replace") as fh:
                if fh.read().startswith(AUTOGRAD_THREAD):
                    return True
        except OSError:
            continue  # a thread that just ended
    return False


def autograd_fork_safe() -> bool:
    """Whether a child forked now can run backward (see above)."""
    return not autograd_threads_running()


# --- the CUDA driver and fork: single-threaded, or no fork ------------------------------------
# The first real GPU (H200, torch 2.11.0+cu130; ../shared/gpu-runs/h200-2026-12-04/call2-fork-diag.txt)
# showed a hazard no Python-level check sees: a tiny fake-tensor trace in the sweep's warm helper
# started the CUDA driver from inside torch's C++ (no device-count call Python could hook, and
# PYTORCH_NVML_BASED_CUDA_CHECK=1 did not help), the helper then ran a second thread, and every
# worker forked from it failed with "CUDA error: initialization error". What every such start
# leaves behind is a thread (the driver's, autograd's, a library's pool), and a thread count is
# something any process can read before it forks. So on a CUDA build a process forks a child that
# may touch the GPU only while it is single-threaded (``fork_hazard``); otherwise the child's work
# runs in a clean process (runner/preload.py: a fresh interpreter) or in this one (predict/pool.py),
# and the run says once why. A CPU build cannot start the driver: its OpenMP threads are handled by
# ``single_threaded`` above.
#
# One kind of thread is no hazard: a pool that its library ends before every fork. numpy's
# OpenBLAS starts one thread per core when it loads (with `import torch`: 16 threads on the H200,
# 2 here) and registers a pthread_atfork handler that shuts the pool down (blas_thread_shutdown_);
# on the H200 the count fell from 16 to 1 after the first fork. So when there is more than one
# thread, ``fork_hazard`` first forks a probe child that exits at once (it runs nothing, so
# nothing in it can fail), which runs those handlers, and counts again.
SETTLE_S = 0.5  # threads that end by themselves get this long before they count


def thread_count() -> Optional[int]:
    """This process's threads (Linux: ``Threads:`` in /proc/self/status), or None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def probe_fork() -> None:
    """Fork a child that exits at once: the atfork handlers of this process's libraries run (see
    above). The child runs no Python and touches nothing."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def fork_hazard(settle_s: float = SETTLE_S) -> Optional[str]:
    """Why a child forked now might find CUDA unusable (None: fork away). Always None on a CPU
    build; on a CUDA build, unless this process is single-threaded once a probe fork has ended
    the pools that end at fork and passing threads have had ``settle_s`` to end (a caller that
    already met a hazard that stays, e.g. the driver's thread, passes 0: no wait per point)."""
    import time

    if not cuda_compiled():
        return None
    deadline = time.monotonic() + settle_s
    probed = False
    while True:
        n = thread_count()
        if n is None:
            return "this process's threads cannot be counted (no /proc/self/status)"
        if n <= 1:
            return None
        if not probed:
            probed = True
            probe_fork()
            continue
        if time.monotonic() >= deadline:
            return (f"this process runs {n} threads (something in it may have started the CUDA driver), "
                    f"and a child forked from it could find CUDA unusable")
        time.sleep(0.02)
