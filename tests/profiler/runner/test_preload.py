"""The sweep's warm helper (profiler.runner.preload): ``watch`` reports a worker's exit code
(negative: the signal), kills it when the sweep asks or goes away, and ``serve`` ends when
the sweep closes its socket, ignoring what is not a run request. (The helper as a sweep
starts it: test_no_cuda_before_fork.py, measure/test_small_points.py.)"""

import os
import pickle
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from attnprof.profiler.runner.preload import serve, watch

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def sockets():
    ours, helpers = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield ours, helpers
    for s in (ours, helpers):
        s.close()


def test_watch_returns_the_workers_exit_code(sockets):
    _, helpers = sockets
    worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert watch(helpers, worker.pid) == 3


def test_watch_kills_the_worker_when_the_sweep_asks(sockets):
    ours, helpers = sockets
    worker = subprocess.Popen(SLEEPER)
    ours.send(pickle.dumps(("kill",)))
    assert watch(helpers, worker.pid) == -signal.SIGUSR1  # no handler: the stack signal's default ends it


def test_a_worker_that_dumps_its_stacks_is_killed_after_the_grace(sockets):
    """A worker has faulthandler on the stack signal (worker_stderr.DUMP_SIGNAL): it writes its
    stacks and goes on, so the helper's SIGKILL ends it."""
    ours, helpers = sockets
    stubborn = [sys.executable, "-c", "import faulthandler, signal, time; "
                "faulthandler.register(signal.SIGUSR1, all_threads=True); print('ready', flush=True); time.sleep(120)"]
    worker = subprocess.Popen(stubborn, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"  # its handler is in place
    ours.send(pickle.dumps(("kill",)))
    assert watch(helpers, worker.pid) == -signal.SIGKILL
    assert "most recent call first" in worker.stderr.read()  # its stacks came first
    worker.stdout.close()
    worker.stderr.close()


def test_watch_kills_and_reaps_the_worker_when_the_sweep_is_gone(sockets):
    ours, helpers = sockets
    worker = subprocess.Popen(SLEEPER)
    ours.close()
    assert watch(helpers, worker.pid) is None
    with pytest.raises(ChildProcessError):
        os.waitpid(worker.pid, os.WNOHANG)  # already reaped: no zombie left


def test_serve_ignores_what_is_no_run_request_and_ends_when_the_socket_closes(sockets):
    ours, helpers = sockets
    read, write = os.pipe()
    try:
        socket.send_fds(ours, [pickle.dumps(("init", []))], [write])  # not a run request: ignored
        ours.send(pickle.dumps(("run", None, None)))  # a run request without its result fd: ignored
        ours.close()
        children = psutil.Process().children()
        serve(helpers)  # returns: nothing was forked, the sweep is gone
        assert psutil.Process().children() == children
    finally:
        os.close(read)
        os.close(write)


def test_a_helper_that_may_not_fork_says_so_once_however_its_thread_count_moves(sockets, monkeypatch):
    """Issue 38 item 1: when the helper is not single-threaded each point starts in a fresh
    process, and the run says why ONCE; the hazard's text names the thread count, which may
    differ from one point to the next (threads come and go), and is still one cause."""
    from attnprof.profiler import forks
    from attnprof.profiler.runner import preload

    ours, helpers = sockets
    counts = iter([3, 4, 3])
    monkeypatch.setattr(forks, "fork_hazard", lambda settle_s=0.5: f"this process runs {next(counts)} threads")
    started = []
    monkeypatch.setattr(preload, "spawn_worker", lambda fd, point, settings, helper, err=None: started.append(point) or 4242)
    told: set = set()
    for point in ("a", "b", "c"):
        assert preload.start_worker(helpers, -1, point, {}, told) == 4242
    assert started == ["a", "b", "c"]  # every point still runs, in a fresh process
    ours.setblocking(False)
    notes = []
    while True:
        try:
            notes.append(pickle.loads(ours.recv(1 << 16)))
        except BlockingIOError:
            break
    assert len(notes) == 1 and notes[0][0] == "note" and "3 threads" in notes[0][1], notes
