"""The sweep's warm helper: imports torch once, then forks one worker per point.

Started by the sweep as ``python -m attnprof.profiler.runner.preload PARENT_PID FD``.
Importing torch and attnprof, one tiny prediction on real tensors (as small points
are predicted) and one tiny fake-tensor run (``warm_fake_tensors``: FakeTensorMode's
lazy imports, ~0.5 s), happen here once instead of in every point's process. Nothing here runs a real kernel or touches CUDA,
and this process stays single-threaded, so forking from it stays safe.

Why not multiprocessing's forkserver: its workers outlive a SIGKILLed sweep, it
brings a resource tracker along, and the sweep cannot see which signal killed a
worker without it. Here the chain is explicit and short-lived:

- the helper runs in its own session (no terminal's Ctrl-C reaches it or its workers;
  the sweep decides) and dies with the sweep (``lifeline``), as each worker dies
  with the helper; when the sweep's socket closes, the helper kills its worker and exits;
- protocol on a SOCK_SEQPACKET socket, one pickled message per packet, from our own
  parent only: ``("init", sys_path)`` -> ``("ready", pid)``; ``("run", point,
  settings)`` + the result pipe's fd -> ``("exited", exit_code, worker_pid)``; ``("kill",)``
  kills the running worker.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys
from typing import Optional

MAX_MESSAGE = 1 << 20


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
    # On a CUDA build, forward only: a backward here would start autograd's device threads, and
    # then no worker forked from here could run one (profiler/forks.py). Each worker's first
    # backward pays for its own imports instead.
    from attnprof.profiler.forks import cuda_compiled

    forward_only = cuda_compiled()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        predict(Point("sdpa", "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1),
                      forward_only=forward_only))
        warm_fake_tensors(forward_only=forward_only)
    finally:
        torch.set_num_threads(threads)


def serve(ctl: socket.socket) -> None:
    """Run points one at a time until the sweep closes the socket."""
    me = os.getpid()
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
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            ctl.close()
            from attnprof.profiler.runner.worker import run_child

            run_child(fds[0], point, settings, me)  # never returns
        os.close(fds[0])
        code = watch(ctl, pid)
        if code is None:
            return
        try:
            ctl.send(pickle.dumps(("exited", code, pid)))
        except OSError:
            return


def watch(ctl: socket.socket, pid: int) -> Optional[int]:
    """Wait for the worker to end, killing it when the sweep asks; its exit code
    (negative: the signal), or None when the sweep is gone (the worker is killed)."""
    try:
        pidfd = os.pidfd_open(pid)  # readable once the worker exits (Linux >= 5.3)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            watched = [ctl] + ([pidfd] if pidfd is not None else [])
            readable, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.05)
            if ctl in readable:
                try:
                    message = ctl.recv(MAX_MESSAGE)
                except OSError:
                    message = b""
                if not message or pickle.loads(message)[0] == "kill":
                    os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this worker's
                if not message:
                    os.waitpid(pid, 0)
                    return None
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
    main(sys.argv)
