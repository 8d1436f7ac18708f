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

import multiprocessing as mp
import os


def cuda_compiled() -> bool:
    """Whether this torch is a CUDA build (asks no device: nothing here poisons fork)."""
    import torch

    return bool(torch.cuda._is_compiled())


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
