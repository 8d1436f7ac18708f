"""THE worker pool of predictions: chains of predictions, each step waiting for the one
before, over this process and forked workers, one prediction at a time; ``spread`` is a
list of independent tasks on it (chains of one step).

A frontier search (points.longest_fitting) is one chain per variant x mode: predict a
length, look at the peak, choose the next length. Given to workers a whole chain at a
time, the slowest chain decides the wall time (measured: an LSH series, whose fake run
grows with n, ran 2.8 s alone at the end while the other core idled). Here every step is
scheduled on its own: whichever process is free takes the next length any chain waits
for, so the cores stay busy until the last step.

``run_chains(step, chains)``: each chain is a generator that yields a task, receives
``step(task)`` back (``send``) and returns its answer; the answers come back in order.
Which ready task a process takes: first one that repeats a ``warm_key`` it has run
before (torch's fake-tensor dispatch cache is per process: measured, an LSH prediction at
64K costs 0.18 s the first time in a process and 0.09 s once that variant and length have
run there), then the highest ``rank``.

This process runs the first step alone, so that the workers, forked from it afterwards,
start with what it imported (the fake-tensor machinery, ~0.5 s) instead of importing it
again. Workers are forked before any thread starts, ignore Ctrl-C (this process decides),
run single-threaded (profiler/forks.py), and end with this call. An exception in a step,
a worker that dies, or Ctrl-C stops every chain and is raised here; no worker outlives it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import traceback
from typing import Callable, Generator, Hashable, Optional

from attnprof.profiler.collector import fewer_collections
from attnprof.profiler.safe_points import deferred

Chain = Generator  # yields a task, is sent step(task), returns its answer


class WorkerDied(RuntimeError):
    """A forked worker ended without answering."""


class Board:
    """What every chain waits for, under one lock: ready tasks, steps running, answers."""

    def __init__(self, chains: list, rank: Callable, warm_key: Callable):
        self.chains, self.rank, self.warm_key = chains, rank, warm_key
        self.answers: list = [None] * len(chains)
        self.ready: dict[int, object] = {}  # chain index -> its next task
        self.running = 0
        self.error: Optional[BaseException] = None
        self.cond = threading.Condition()
        for i in range(len(chains)):
            self._advance(i, None, first=True)

    def _advance(self, i: int, result, first: bool = False) -> None:
        try:
            task = next(self.chains[i]) if first else self.chains[i].send(result)
        except StopIteration as done:
            self.answers[i] = done.value
        else:
            self.ready[i] = task

    def take(self, warm: set, wait: bool = True, from_end: bool = False) -> Optional[tuple]:
        """The next (chain, task) for a process whose warm keys are ``warm``; None when
        every chain has its answer (or, without ``wait``, when none is ready now). Among
        equals the first chain, or with ``from_end`` the last: this process works from the
        start of the list, the workers from its end, so neighbours (the same variant's
        modes) stay in one process until they meet."""
        with self.cond:
            while not self.ready and self.running and self.error is None and wait:
                self.cond.wait()
            if self.error is not None:
                raise self.error
            if not self.ready:
                return None
            i = max(self.ready, key=lambda j: (self.warm_key(self.ready[j]) in warm, self.rank(self.ready[j]),
                                               j if from_end else -j))
            task = self.ready.pop(i)
            warm.add(self.warm_key(task))
            self.running += 1
            return i, task

    def give(self, i: int, result) -> None:
        with self.cond:
            self.running -= 1
            try:
                self._advance(i, result)
            except BaseException as exc:  # the chain's own logic failed: every chain stops
                self.error = self.error or exc
            self.cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error = self.error or exc
            self.cond.notify_all()


def run_chains(step: Callable, chains: list, *, workers: int = 1, rank: Callable = lambda task: 0,
               warm_key: Callable[[object], Hashable] = lambda task: None) -> list:
    """Every chain's answer (see the module docstring), over this process and ``workers``
    - 1 forked ones. ``step``, its tasks and results must be picklable when workers > 1.
    Collections are fewer meanwhile (profiler/collector.py)."""
    with fewer_collections():
        return _run(step, list(chains), workers, rank, warm_key)


def _run(step: Callable, chains: list, workers: int, rank: Callable, warm_key: Callable) -> list:
    from attnprof.profiler.forks import autograd_fork_safe, cuda_compiled

    board = Board(chains, rank, warm_key)
    mine: set = set()
    # Warm first (the workers inherit what this process imported and cached), except on a CUDA
    # build: there this process's first backward starts autograd's device threads, after which
    # no forked worker can run backward (profiler/forks.py). Then the workers warm themselves.
    if not cuda_compiled() or not autograd_fork_safe():
        first = board.take(mine, wait=False)
        if first is None:
            return board.answers
        with deferred():  # as every step (_here)
            result = step(first[1])
        board.give(first[0], result)
    if workers < 2 or mp.current_process().daemon or not board.ready or not fork_allowed():
        return _here(board, step, mine)  # a pool's worker cannot fork; nor can a multi-threaded CUDA build
    procs, feeders = [], []
    sys.stdout.flush()  # a forked child must not write what this process had buffered
    sys.stderr.flush()
    try:
        me = os.getpid()
        for _ in range(workers - 1):
            ours, theirs = mp.get_context("fork").Pipe()
            proc = mp.get_context("fork").Process(target=_serve, args=(theirs, step, me, ours), daemon=True)
            proc.start()
            theirs.close()
            procs.append((proc, ours))
        for proc, conn in procs:  # threads only after the last fork
            feeder = threading.Thread(target=_feed, args=(board, proc, conn), daemon=True)
            feeder.start()
            feeders.append(feeder)
        return _here(board, step, mine)
    except BaseException as exc:
        board.fail(exc)
        raise
    finally:
        for proc, conn in procs:
            if board.error is not None:
                proc.kill()
            try:
                conn.send(None)  # a worker waiting for work ends
            except (OSError, ValueError):
                pass
        for feeder in feeders:
            feeder.join()
        for proc, conn in procs:
            proc.join()
            conn.close()


_TOLD: set = set()  # the fork hazard this process has said (one at most: a later one names another thread count)


def fork_allowed() -> bool:
    """Whether this process may fork prediction workers now (profiler/forks.fork_hazard: on a
    CUDA build only while single-threaded, autograd's device threads included); when not, the
    predictions run here, and stderr says why once per process."""
    from attnprof.profiler.forks import fork_hazard

    hazard = fork_hazard()
    if hazard is None:
        return True
    if not _TOLD:
        _TOLD.add(hazard)
        print(f"warning: predictions run in this process, one at a time, rather than in forked workers: "
              f"{hazard}", file=sys.stderr, flush=True)
    return False


def _here(board: Board, step: Callable, mine: set) -> list:
    """This process's share: steps until every chain has its answer."""
    while (got := board.take(mine)) is not None:
        i, task = got
        try:
            with deferred():  # a step is a fake run and its teardown: Ctrl-C waits for its end
                result = step(task)
        except BaseException as exc:
            board.fail(exc)
            raise
        board.give(i, result)
    return board.answers


def _feed(board: Board, proc, conn) -> None:
    """One thread per worker: hands it the next ready task, gives its result back."""
    warm: set = set()
    while True:
        try:
            got = board.take(warm, from_end=True)
        except BaseException:
            return  # stopped: the caller raises
        if got is None:
            return
        i, task = got
        try:
            conn.send(task)
            ok, result = conn.recv()
        except (EOFError, OSError):
            proc.join(1)
            board.fail(WorkerDied(f"a prediction worker ended without answering (exit code {proc.exitcode})"))
            return
        if not ok:
            board.fail(result)
            return
        board.give(i, result)


def _serve(conn, step: Callable, parent: int, parents_end) -> None:
    """A worker: steps until it is sent None (or its parent is gone, however it went)."""
    from attnprof.profiler.forks import worker_lifeline, single_threaded

    worker_lifeline(parent)  # SIGKILL of the parent kills this worker; SIGINT is the parent's to handle
    parents_end.close()  # else this worker holds both ends of its pipe and never sees EOF
    single_threaded()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            answer = (True, step(task))
        except BaseException as exc:  # raised in the parent: the exception if it pickles, else its text
            answer = (False, exc)
        try:
            conn.send(answer)
        except Exception as exc:  # an answer that does not pickle
            what = "".join(traceback.format_exception_only(answer[1])).strip() if not answer[0] else repr(exc)
            conn.send((False, RuntimeError(f"a prediction worker could not send its answer back: {what}")))


SPREAD_FROM = 3  # fewer tasks than this run in this process: forking a worker costs more than it saves


def spread(fn: Callable, tasks: list, workers: Optional[int] = None,
           warm_key: Callable[[object], Hashable] = lambda task: None) -> list:
    """``[fn(t) for t in tasks]``, over this process and ``workers - 1`` forked ones
    (default: one per usable core), each task a chain of one step (``run_chains``): this
    process does the first task alone, then forks the workers, which so start with what it
    imported lazily (sympy, torch's fake-tensor machinery) and with the fake-tensor
    dispatch cache it filled. Then this process takes tasks from the start of the list and
    the workers from its end, each first a task whose ``warm_key`` it has run before.
    Fewer than SPREAD_FROM tasks run here: forking a worker would cost more than it saves."""
    from attnprof.profiler.forks import usable_cores

    tasks = list(tasks)
    workers = workers or usable_cores()
    return run_chains(fn, [_once(t) for t in tasks], workers=workers if len(tasks) >= SPREAD_FROM else 1,
                      warm_key=warm_key)


def _once(task):
    """A chain of one step."""
    return (yield task)


def within(fn: Callable, arg_tuples: list, seconds: float) -> list:
    """``fn(*args)`` for each of ``arg_tuples``, one task per forked worker process (up to
    one per core), keeping the results that finish within ``seconds`` (in order, the
    unfinished and the failed left out); the workers still busy then are terminated.
    Where a forked worker could find CUDA unusable (``fork_allowed``: a multi-threaded process
    on a CUDA build, where a fake-tensor run may have started the driver), the tasks run in this
    process, one after another, until the deadline."""
    import time

    from attnprof.profiler.forks import fork_pool, usable_cores

    deadline = time.monotonic() + seconds
    if not fork_allowed():
        out = []
        for args in arg_tuples:
            if time.monotonic() >= deadline:
                break
            out.append(fn(*args))
        return out
    pool = fork_pool(max(1, min(len(arg_tuples), usable_cores())))  # the cores this process may use
    out = []
    try:
        pending = [pool.apply_async(fn, args) for args in arg_tuples]
        for result in pending:
            result.wait(max(0.0, deadline - time.monotonic()))
            if result.ready() and result.successful():
                out.append(result.get())
    finally:
        pool.terminate()  # unfinished tasks: their figures stay extrapolations ('~')
        pool.join()
    return out
