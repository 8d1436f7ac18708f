"""Forked workers (profiler.forks): single-threaded, ignoring Ctrl-C, and forked only while
autograd's device threads are not running (read off the threads' names)."""

import glob
import os
import signal

import torch

from attnprof.profiler import forks


def test_usable_cores_are_this_processs_affinity():
    assert forks.usable_cores() == len(os.sched_getaffinity(0)) >= 1


def test_cuda_compiled_is_whether_this_torch_is_a_cuda_build():
    assert forks.cuda_compiled() is (torch.version.cuda is not None)


def test_pool_workers_run_single_threaded_and_leave_ctrl_c_to_the_parent():
    with forks.fork_pool(1) as pool:
        assert pool.apply(torch.get_num_threads) == 1
        assert pool.apply(signal.getsignal, (signal.SIGINT,)) == signal.SIG_IGN
        assert pool.apply(signal.getsignal, (signal.SIGTERM,)) == signal.SIG_DFL
        assert pool.apply(os.getppid) == os.getpid()


def comm_files(folder, *names):
    """A /proc/PID/task/*/comm stand-in: one file per thread, holding its name."""
    folder.mkdir()
    paths = []
    for i, name in enumerate(names):
        path = folder / f"{i}-comm"
        path.write_text(name + "\n")
        paths.append(str(path))
    return paths


def test_autograd_threads_are_found_by_their_names(tmp_path, monkeypatch):
    running = comm_files(tmp_path / "running", "python", "pt_autograd_0")
    monkeypatch.setattr(glob, "glob", lambda pattern: running)
    assert forks.autograd_threads_running() is True and forks.autograd_fork_safe() is False
    quiet = comm_files(tmp_path / "quiet", "python", "pt_main_thread")
    monkeypatch.setattr(glob, "glob", lambda pattern: quiet + [str(tmp_path / "a-thread-that-ended")])
    assert forks.autograd_threads_running() is False and forks.autograd_fork_safe() is True


def test_without_proc_a_cuda_build_is_assumed_to_run_them(monkeypatch):
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    for compiled in (True, False):
        monkeypatch.setattr(forks, "cuda_compiled", lambda: compiled)
        assert forks.autograd_threads_running() is compiled


def test_this_process_reads_its_own_threads():
    assert glob.glob(f"/proc/{os.getpid()}/task/*/comm")  # the suite runs on Linux: the real path is taken
    assert isinstance(forks.autograd_threads_running(), bool)


# --- fork_hazard: single-threaded, or no fork (a CUDA build) -------------------------------------
def test_thread_count_is_read_from_proc():
    import threading

    before = forks.thread_count()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forks.thread_count() == before + 1
    finally:
        stop.set()
        thread.join()


def test_a_cpu_build_never_has_a_fork_hazard(monkeypatch):
    monkeypatch.setattr(forks, "cuda_compiled", lambda: False)
    monkeypatch.setattr(forks, "thread_count", lambda: 17)
    assert forks.fork_hazard() is None


def test_a_multi_threaded_cuda_build_has_one_and_says_how_many_threads(monkeypatch):
    probes = []
    monkeypatch.setattr(forks, "cuda_compiled", lambda: True)
    monkeypatch.setattr(forks, "thread_count", lambda: 3)
    monkeypatch.setattr(forks, "probe_fork", lambda: probes.append(1))
    monkeypatch.setattr(forks, "SETTLE_S", 0.05)
    assert "runs 3 threads" in forks.fork_hazard()
    assert probes == [1]  # one probe fork, then the count still says 3


def test_threads_that_end_at_fork_are_no_hazard(monkeypatch):
    """numpy's OpenBLAS pool ends before every fork (its atfork handler): after the probe, one thread."""
    counts = iter([16, 1])
    monkeypatch.setattr(forks, "cuda_compiled", lambda: True)
    monkeypatch.setattr(forks, "thread_count", lambda: next(counts))
    monkeypatch.setattr(forks, "probe_fork", lambda: None)
    assert forks.fork_hazard() is None


def test_the_probe_fork_really_ends_openblas_threads():
    """In a fresh interpreter (this one runs whatever threads earlier tests started): numpy's OpenBLAS
    pool, started by a matmul, is gone after one probe fork, as on the H200 (16 threads, then 1)."""
    import subprocess
    import sys

    script = ("import numpy as np\nfrom attnprof.profiler import forks\na = np.ones((256, 256)); a @ a\n"
              "before = forks.thread_count()\nforks.probe_fork()\nprint(before, forks.thread_count())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    assert before >= 1 and after == 1, (before, after)


def test_without_proc_a_cuda_build_does_not_fork(monkeypatch):
    monkeypatch.setattr(forks, "cuda_compiled", lambda: True)
    monkeypatch.setattr(forks, "thread_count", lambda: None)
    assert "cannot be counted" in forks.fork_hazard()


def test_a_caller_that_met_a_hazard_need_not_wait_for_threads_to_end(monkeypatch):
    import time as clock

    waits = []
    monkeypatch.setattr(forks, "cuda_compiled", lambda: True)
    monkeypatch.setattr(forks, "thread_count", lambda: 2)
    monkeypatch.setattr(forks, "probe_fork", lambda: None)
    monkeypatch.setattr(clock, "sleep", lambda s: waits.append(s))
    assert "runs 2 threads" in forks.fork_hazard(0.0) and waits == []


def _checkpointed_step(x):
    from torch.utils.checkpoint import checkpoint

    y = checkpoint(lambda t: (t * 2).sin(), x, use_reentrant=False)
    y.sum().backward()


def test_a_cpu_checkpoint_asks_for_no_accelerator_inside_the_context(monkeypatch):
    """torch/utils/checkpoint.py asks ``torch.accelerator.current_accelerator(True)`` for CPU-only
    arguments (on a CUDA build: a device count, which poisons fork); inside the context it does not,
    the gradient is the same, and the unset default is unset again after it."""
    import torch
    from torch.utils.checkpoint import DefaultDeviceType

    from attnprof.profiler.forks import checkpoints_ask_no_device

    asked = []
    monkeypatch.setattr(DefaultDeviceType, "_default_device_type", None)
    real = torch.accelerator.current_accelerator

    def current_accelerator(check_available=False):  # (fork_rng asks too, without checking: no device query)
        if check_available:
            asked.append(1)
            return None
        return real(False)

    monkeypatch.setattr(torch.accelerator, "current_accelerator", current_accelerator)
    x = torch.randn(8, requires_grad=True)
    with checkpoints_ask_no_device():
        _checkpointed_step(x)
    assert asked == []
    torch.testing.assert_close(x.grad, 2 * (2 * x.detach()).cos())
    _checkpointed_step(x)  # outside: torch asks, as before
    assert asked == [1]


def test_a_device_type_set_before_is_kept(monkeypatch):
    from torch.utils.checkpoint import DefaultDeviceType

    from attnprof.profiler.forks import checkpoints_ask_no_device

    monkeypatch.setattr(DefaultDeviceType, "_default_device_type", "xpu")
    with checkpoints_ask_no_device():
        assert DefaultDeviceType.get_device_type() == "xpu"
    assert DefaultDeviceType.get_device_type() == "xpu"
