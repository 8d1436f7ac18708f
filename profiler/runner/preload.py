"""The sweep's warm helper: imports torch once, then forks one worker per point.

Started by the sweep as ``python -m attnprof.profiler.runner.preload PARENT_PID FD``.
Importing torch and attnprof, one tiny prediction on real tensors (as small points
are predicted) and one tiny fake-tensor run (``warm_fake_tensors``: FakeTensorMode's
lazy imports, ~0.5 s) happen here once instead of in every point's process; on a CUDA
build only the steps the first real GPU showed safe (below). ``torch._dynamo`` is imported
nowhere in a sweep (the worker measures under ``fakemode.light_dynamo``). Before every fork the helper
checks that it is still single-threaded (``forks.fork_hazard``); when it is not, the point
runs in a clean process instead (a fresh interpreter, ``spawn_worker``), and the sweep is told
once why (a ``("note", text)`` message).

Why not multiprocessing's forkserver: its workers outlive a SIGKILLed sweep, it
brings a resource tracker along, and the sweep cannot see which signal killed a
worker without it. Here the chain is explicit and short-lived:

- the helper runs in its own session (no terminal's Ctrl-C reaches it or its workers;
  the sweep decides) and dies with the sweep (``lifeline``), as each worker dies
  with the helper; when the sweep's socket closes, the helper kills its worker and exits;
- protocol on a SOCK_SEQPACKET socket, one pickled message per packet, from our own
  parent only: ``("init", sys_path)`` -> ``("ready", pid)``; ``("run", point,
  settings)`` + the result pipe's fd -> [``("note", text)``] ``("exited", exit_code, worker_pid,
  stderr)`` (what a worker that did not exit 0 wrote to its standard error: worker_stderr.py);
  ``("kill",)`` kills the running worker (SIGUSR1 for its stacks, then SIGKILL).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys
import time
from typing import Optional

from attnprof.profiler.runner.worker_stderr import DUMP_GRACE_S, DUMP_SIGNAL, capture_file, read_tail

MAX_MESSAGE = 1 << 20
HELPER_MODULE = "attnprof.profiler.runner.preload"  # this module, as `python -m` runs it


def warm_up() -> None:
    import torch

    from attnprof.profiler.runner import worker  # noqa: F401  (the import is the point)
    from attnprof.profiler.predict.fake_run import predict, warm_fake_tensors
    from attnprof.profiler.records import Point, Shape

    # One thread: a small point is predicted by a real CPU run (predict/fake_run.small_point), and a
    # real run on more threads starts OpenMP's thread pool here. A process forked after that
    # hangs in its first parallel region (GNU OpenMP is not fork-safe), so the pool must not
    # exist in this process: its workers are forked from it.
    #
    # On a CUDA build, only what the first real GPU showed leaves a forked worker able to use CUDA
    # (../shared/gpu-runs/h200-2026-12-04/call2-fork-diag.txt: the imports above and a small
    # forward-only prediction, which runs for real on the CPU), forward only: a backward here would
    # start autograd's device threads (profiler/forks.py). The fake-tensor warm-up started the CUDA
    # driver there, so on a CUDA build each worker pays for FakeTensorMode's lazy imports itself.
    from attnprof.profiler.forks import cuda_compiled

    cuda_build = cuda_compiled()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        predict(Point("sdpa", "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1),
                      forward_only=cuda_build))
        if not cuda_build:
            warm_fake_tensors(forward_only=False)
        # No torch._dynamo here: a worker measures under fakemode.light_dynamo (worker.measure_point),
        # so neither its memory pass nor its timing pass imports the compiler (docs/gpu.md).
    finally:
        torch.set_num_threads(threads)


def serve(ctl: socket.socket) -> None:
    """Run points one at a time until the sweep closes the socket."""
    told: set = set()  # the fork hazard said to the sweep (one at most)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 1)
        except OSError:
            return
        if not message:
            return  # the sweep is gone or done
        request = pickle.loads(message)
        if request[0] != "run" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        _, point, settings = request
        err = capture_file()  # the worker's standard error, kept for its point (worker_stderr.py)
        try:
            pid = start_worker(ctl, fds[0], point, settings, told, err)
            os.close(fds[0])
            code = watch(ctl, pid) if pid is not None else 1
            said = read_tail(err)
        finally:
            if err is not None:
                err.close()
        if code is None:
            return
        if code == 0 and said:  # a worker that ended well: its warnings reach the terminal, as before
            sys.stderr.write(said)
            sys.stderr.flush()
        try:
            ctl.send(pickle.dumps(("exited", code, pid, "" if code == 0 else said)))
        except OSError:
            return


def start_worker(ctl: socket.socket, result_fd: int, point, settings: dict, told: set,
                 err=None) -> Optional[int]:
    """The worker's pid: forked from here while this process is single-threaded, else started
    in a fresh interpreter (the sweep is told why once: the first hazard; a later one names
    another thread count, not another cause); None if none could start. ``err``: a file
    that becomes the worker's standard error (worker_stderr.capture_file), or None."""
    from attnprof.profiler.forks import SETTLE_S, fork_hazard

    sys.stdout.flush()
    sys.stderr.flush()
    me = os.getpid()
    hazard = fork_hazard(0.0 if told else SETTLE_S)  # after a first hazard, no waiting per point
    if hazard is None:
        pid = os.fork()
        if pid == 0:
            ctl.close()
            if err is not None:
                os.dup2(err.fileno(), 2)
            from attnprof.profiler.runner.worker import run_child

            run_child(result_fd, point, settings, me)  # never returns
        return pid
    if not told:
        told.add(hazard)
        try:
            ctl.send(pickle.dumps(("note", f"the measuring helper did not fork: {hazard}; each point runs "
                                           f"in a fresh process instead (slower to start)")))
        except OSError:
            pass
    try:
        return spawn_worker(result_fd, point, settings, me, err)
    except OSError as exc:
        print(f"attnprof: cannot start a worker process: {exc.strerror or exc}", file=sys.stderr)
        return None


def spawn_worker(result_fd: int, point, settings: dict, helper_pid: int, err=None) -> int:
    """A worker in a fresh interpreter (fork + exec: nothing of this process's state, threads or
    CUDA driver carries over), given the point on its standard input; its pid, a child of this
    process, reaped by ``watch`` as a forked one is. It imports torch itself (seconds)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", HELPER_MODULE, "--worker", str(helper_pid), str(result_fd)],
                            stdin=subprocess.PIPE, pass_fds=[result_fd], stderr=err)
    try:
        # the point unpickled only once the sweep's sys.path is in place (a plug-in variant's module)
        proc.stdin.write(pickle.dumps((list(sys.path), pickle.dumps((point, settings)))))
        proc.stdin.close()
    except OSError:
        pass  # it died at once: its exit code says so
    proc.returncode = 0  # reaped by watch() through os.waitpid, not by Popen (no warning at exit)
    return proc.pid


def worker_main(argv: list[str]) -> None:
    """``preload --worker HELPER_PID FD``: the clean-process worker of ``spawn_worker``."""
    helper, fd = int(argv[2]), int(argv[3])
    sys_path, payload = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = sys_path
    point, settings = pickle.loads(payload)
    from attnprof.profiler.runner.worker import run_child

    run_child(fd, point, settings, helper)  # never returns


def watch(ctl: socket.socket, pid: int) -> Optional[int]:
    """Wait for the worker to end, killing it when the sweep asks (DUMP_SIGNAL, on which its
    faulthandler writes where it hung, then SIGKILL DUMP_GRACE_S later); its exit code
    (negative: the signal), or None when the sweep is gone (the worker is killed at once)."""
    try:
        pidfd = os.pidfd_open(pid)  # readable once the worker exits (Linux >= 5.3)
    except (AttributeError, OSError):
        pidfd = None
    kill_at = None  # when a worker asked for its stacks gets SIGKILL
    try:
        while True:
            watched = ([ctl] if kill_at is None else []) + ([pidfd] if pidfd is not None else [])
            wait_s = None if pidfd is not None else 0.05
            if kill_at is not None:
                wait_s = max(0.0, min(wait_s or DUMP_GRACE_S, kill_at - time.monotonic()))
            readable, _, _ = select.select(watched, [], [], wait_s)
            if ctl in readable:
                try:
                    message = ctl.recv(MAX_MESSAGE)
                except OSError:
                    message = b""
                if not message:
                    os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this worker's
                    os.waitpid(pid, 0)
                    return None
                if pickle.loads(message)[0] == "kill":
                    os.kill(pid, DUMP_SIGNAL)  # its stacks to its stderr (a worker still importing dies of it)
                    kill_at = time.monotonic() + DUMP_GRACE_S
            if kill_at is not None and time.monotonic() >= kill_at:
                os.kill(pid, signal.SIGKILL)
                kill_at = float("inf")
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def main(argv: list[str]) -> None:
    from attnprof.profiler.lifeline import die_with_parent

    parent, fd = int(argv[1]), int(argv[2])
    die_with_parent(parent)  # first: before the slow imports, the sweep may already be gone
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctl = socket.socket(fileno=fd)
    message = ctl.recv(MAX_MESSAGE)
    if not message:
        return
    _, sys_path = pickle.loads(message)
    sys.path[:] = sys_path  # the sweep's: a plug-in it can import, its workers can too
    warm_up()
    ctl.send(pickle.dumps(("ready", os.getpid())))
    serve(ctl)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker_main(sys.argv)
    else:
        main(sys.argv)
