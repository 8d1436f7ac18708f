"""run_chains: chains of steps over this process and forked workers give the answers a
serial run gives, in order; a failing step, a failing chain, a dying worker and Ctrl-C
end the call with that error, leaving no worker behind; a process keeps to the keys it
has warmed, then takes the highest rank."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from attnprof.profiler.predict.pool import Board, WorkerDied, run_chains

PARENT = os.getpid()


@pytest.fixture(autouse=True)
def forking_allowed(monkeypatch):
    """The pool's own mechanics, whatever build runs the suite: on a CUDA build the pytest process is
    multi-threaded after earlier tests (autograd's device threads), and fork_allowed would keep every
    step here. A test of the refusal sets its own hazard over this one."""
    from attnprof.profiler import forks

    monkeypatch.setattr(forks, "fork_hazard", lambda settle_s=0.5: None)


def _square(x):
    return x * x, os.getpid()


def _countdown(start: int):
    """A chain: squares start, start-1, ..., 1; returns the squares and who computed them."""
    squares, pids = [], set()
    for x in range(start, 0, -1):
        value, pid = yield x
        squares.append(value)
        pids.add(pid)
    return squares, pids


def _fails_at(bad):
    def step(x):
        if x == bad and os.getpid() != PARENT:
            raise ValueError(f"bad step {x}")
        if x == bad:
            raise KeyError(x)
        return _square(x)
    return step


def test_answers_equal_a_serial_runs_in_order_and_both_processes_work():
    chains = lambda: [_countdown(k) for k in (5, 1, 7, 3, 6, 2)]  # noqa: E731
    serial = run_chains(_square, chains(), workers=1)
    spread = run_chains(_square, chains(), workers=2)
    assert [a[0] for a in spread] == [a[0] for a in serial] == [[x * x for x in range(k, 0, -1)]
                                                               for k in (5, 1, 7, 3, 6, 2)]
    assert {pid for a in serial for pid in a[1]} == {PARENT}
    pids = {pid for a in spread for pid in a[1]}
    assert PARENT in pids and len(pids) == 2
    assert not mp.active_children()


def test_no_chains_and_chains_that_ask_nothing():
    def nothing():
        return "done"
        yield  # noqa: unreachable: a generator that returns at once

    assert run_chains(_square, [], workers=2) == []
    assert run_chains(_square, [nothing(), nothing()], workers=2) == ["done", "done"]


def test_a_failing_step_is_raised_and_no_worker_is_left():
    """Step 3 fails in whichever process runs it (ValueError in a worker, KeyError here)."""
    with pytest.raises((ValueError, KeyError)):
        run_chains(_fails_at(3), [_countdown(9) for _ in range(4)], workers=2)
    assert not mp.active_children()


def test_a_failing_chain_is_raised():
    def broken():
        yield 1
        raise ArithmeticError("the search itself failed")

    with pytest.raises(ArithmeticError, match="search itself"):
        run_chains(_square, [_countdown(4), broken(), _countdown(4)], workers=2)
    assert not mp.active_children()


def _dies_in_a_worker(x):
    if os.getpid() != PARENT:
        os._exit(3)
    return _square(x)


def test_a_worker_that_dies_is_an_error_not_a_hang():
    with pytest.raises(WorkerDied, match="exit code 3"):
        run_chains(_dies_in_a_worker, [_countdown(6) for _ in range(4)], workers=2)
    assert not mp.active_children()


def _interrupted_here(x):
    """Ctrl-C in this process at its first step while a worker lives. Not at a fixed task: which
    process runs a given step is a race (CI once saw the worker take every x == 2, and no Ctrl-C
    came). This process always gets a step after the fork: the worker's feeder holds one task at a
    time and four chains are ready."""
    if os.getpid() == PARENT and mp.active_children():
        raise KeyboardInterrupt
    return _square(x)


def test_ctrl_c_here_stops_every_worker():
    with pytest.raises(KeyboardInterrupt):
        run_chains(_interrupted_here, [_countdown(8) for _ in range(4)], workers=2)
    assert not mp.active_children()


def test_a_process_keeps_to_its_warm_keys_then_takes_the_highest_rank():
    def one(task):
        yield task
        return task

    tasks = [("lsh", 1024), ("full", 65536), ("lsh", 65536), ("full", 1024)]
    board = Board([one(t) for t in tasks], rank=lambda t: t[1], warm_key=lambda t: t)
    warm = {("lsh", 1024)}
    assert board.take(warm)[1] == ("lsh", 1024)  # warm first, though its rank is lowest
    assert board.take(warm)[1] == ("full", 65536)  # then the highest rank (the first of equals)
    assert board.take(warm)[1] == ("lsh", 65536)
    assert ("full", 65536) in warm


def test_within_sizes_its_pool_by_the_usable_cores_not_the_machines(monkeypatch):
    """Under an affinity mask (taskset, a container's cpuset) the machine's count overstates."""
    from attnprof.profiler import forks
    from attnprof.profiler.predict.pool import within

    sizes = []
    real_pool = forks.fork_pool
    monkeypatch.setattr(forks, "usable_cores", lambda: 1)
    monkeypatch.setattr(forks, "fork_pool", lambda n: sizes.append(n) or real_pool(n))
    assert within(pow, [(2, 3), (3, 2), (2, 2)], 60.0) == [8, 9, 4]
    assert sizes == [1]


def test_a_process_that_may_not_fork_says_so_once_however_its_thread_count_moves(monkeypatch, capsys):
    """fork_allowed's warning is said once per process: the hazard's text names a thread
    count that may differ from one call to the next, and is still one cause."""
    from attnprof.profiler import forks
    from attnprof.profiler.predict import pool

    counts = iter([5, 6, 7])
    monkeypatch.setattr(forks, "fork_hazard", lambda settle_s=0.5: f"this process runs {next(counts)} threads")
    assert [pool.fork_allowed() for _ in range(3)] == [False, False, False]
    said = [line for line in capsys.readouterr().err.splitlines() if "rather than in forked workers" in line]
    assert len(said) <= 1, said  # none when an earlier test of this process said it already
