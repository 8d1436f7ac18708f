"""The sweep's side of point isolation: each point runs in a worker forked from a warm
helper process (``preload``), so an OOM, a crash or a hang is that point's status.

Every wait here also watches the sweep's ``Interrupts``: a Ctrl-C or SIGTERM while a
point hangs stops the wait at once, the helper and its worker are killed, and
``Interrupted`` goes up to the sweep. Whatever ends this process, nothing it started
keeps running: the helper and its workers carry a parent-death signal (``lifeline``),
and ``close`` kills the helper's whole process group.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Callable, Optional

from attnprof.errors import UserError
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.preload import HELPER_MODULE  # the helper's module, as `python -m` runs it
from attnprof.profiler.runner.failures import STDERR_KEY
from attnprof.profiler.runner.worker_stderr import DUMP_GRACE_S, with_where

READY_TIMEOUT_S = 600.0  # importing torch on a loaded machine can take a minute
LINGER_S = 10.0  # a worker that sent its result gets this long to exit before it is killed
KILL_WAIT_S = DUMP_GRACE_S + 5.0  # the helper's answer to a kill (stacks, then SIGKILL); after that the helper goes
MAX_WAIT_S = 3600.0  # one wait's longest timeout (select overflows near 2**31 ms)
MAX_MESSAGE = 1 << 20


class HelperError(UserError):
    """The helper process could not start; one line (its own error is printed above it).
    Not the user's mistake: exit code 1, like a failing disk."""

    exit_code = 1


class PointRunner:
    """Runs one point at a time in a fresh worker forked from one warm helper.

    ``run`` waits for the point; ``begin`` + ``advance`` do the same without waiting, so
    that one loop can drive several runners at once (``executors.local``, one per GPU).
    ``env``: variables added to the helper's environment, and so its workers' (e.g.
    ``CUDA_VISIBLE_DEVICES``: the helper never touches CUDA, its workers see one GPU).
    ``note``: called with each line the helper sends (preload: why it started a point's worker in
    a fresh process rather than forking it).
    """

    def __init__(self, interrupts: Optional[Interrupts] = None, env: Optional[dict] = None,
                 note: Callable[[str], None] = lambda line: None):
        self.interrupts = interrupts or Interrupts()  # not entered: never fires
        self.env = dict(env or {})
        self.note = note  # what the helper has to say (e.g. why it did not fork), one line each
        self.helper: Optional[subprocess.Popen] = None
        self.ctl: Optional[socket.socket] = None
        self.job: Optional[_Job] = None

    # --- the helper ---------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the helper without waiting for it to be ready (``await_ready``)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.helper = subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE, str(os.getpid()), str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, **self.env} if self.env else None)
        except OSError as exc:
            ours.close()
            raise HelperError(f"cannot start the measuring helper process: {exc.strerror or exc}") from None
        finally:
            theirs.close()
        self.ctl = ours
        try:
            ours.send(pickle.dumps(("init", list(sys.path))))
        except OSError:
            pass  # it died already; the wait below says so

    def await_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.ctl in self._wait([self.ctl], deadline):
                message = self._receive()
                if message is None:
                    code = self.helper.wait()
                    self.close()
                    raise HelperError(f"the measuring helper process exited with code {code} while starting")
                if message[0] == "ready":
                    return
            if time.monotonic() >= deadline:
                self.close()
                raise HelperError(f"the measuring helper process was not ready within {READY_TIMEOUT_S:.0f} s")

    def _start(self) -> None:
        self.spawn()
        self.await_ready()

    @property
    def alive(self) -> bool:
        return self.helper is not None and self.helper.poll() is None

    def close(self) -> None:
        """Kill the helper and any worker of it (one process group), and reap the helper."""
        helper, self.helper = self.helper, None
        if self.job is not None:
            self.job.result.close()
            self.job = None
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        if helper is None:
            return
        if helper.poll() is None:  # not reaped: its pid, the group's id, cannot have been reused
            try:
                os.killpg(helper.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        helper.wait()

    # --- one point ----------------------------------------------------------------------
    def run(self, point, settings) -> dict:
        """The worker's record (a dict with "variant"), or {"status", "reason"} when it
        timed out or crashed. Raises Interrupted when a signal came meanwhile."""
        try:
            result = self.begin(point, settings.for_child())
            while result is None:
                result = self.advance(self._wait(self.watched(), self.deadline()))
            return result
        except BaseException:
            self.close()
            raise

    def begin(self, point, child_settings: dict) -> Optional[dict]:
        """Send the point to a fresh worker and return at once: None while it runs
        (``advance`` says when it is done), or its result when it could not start."""
        if not self.alive:
            self.close()
            self._start()
        read_fd, write_fd = os.pipe()
        result = Connection(read_fd, writable=False)
        try:
            sent = {**child_settings, "sent_at": time.time()}  # the worker's "start" phase (point_phases_s)
            socket.send_fds(self.ctl, [pickle.dumps(("run", point, sent))], [write_fd])
        except OSError:
            result.close()
            self.close()
            return {"status": "crashed", "reason": "the measuring helper process died before the point started"}
        finally:
            os.close(write_fd)
        self.job = _Job(result, time.monotonic() + child_settings["point_timeout_s"],
                        child_settings["point_timeout_s"])
        return None

    def watched(self) -> list:
        """What to wait on while a point runs: its result pipe (until read) and the helper's socket."""
        job = self.job
        return ([job.result] if job.reading else []) + [self.ctl]

    def deadline(self) -> float:
        return self.job.deadline

    def advance(self, ready: list) -> Optional[dict]:
        """Take what is ``ready`` of the running point; its result once it is over, else None.
        Past its deadline the worker is killed: ``timeout``, or the result it sent before."""
        job = self.job
        if job.reading and job.result in ready:
            job.reading = False
            try:
                job.data = job.result.recv()
            except (EOFError, OSError):
                job.data = None  # died before sending: the exit code says how
            if job.data is not None:
                job.deadline = min(job.deadline, time.monotonic() + LINGER_S)
        if self.ctl in ready:
            message = self._receive()
            if message is None:
                data = job.data
                self.close()
                return data or {"status": "crashed", "reason": "the measuring helper process died during the point"}
            if message[0] == "exited":
                job.exited(message)
            elif message[0] == "note" and len(message) == 2 and isinstance(message[1], str):
                self.note(message[1])
        if job.code is not None:
            return self._end(job.data if job.data is not None else {**_crash(job.code), "worker_pid": job.pid})
        if time.monotonic() >= job.deadline:
            self._kill_worker()
            if job.data is not None:
                return self._end(job.data)  # sent its result, then lingered
            return self._end({"status": "timeout",
                              "reason": f"no result within --point-timeout {job.timeout_s:g} s; worker killed"})
        return None

    def _end(self, result: dict) -> dict:
        """``result``; one the worker did not send (it crashed or timed out) with what the
        worker wrote to its standard error (worker_stderr.py): where it died, and the text
        for the point's log."""
        job, self.job = self.job, None
        if job is None:
            return result
        job.result.close()
        if "variant" not in result and job.stderr:
            result = {**result, "reason": with_where(result.get("reason", ""), job.stderr), STDERR_KEY: job.stderr}
        return result

    def _kill_worker(self) -> None:
        try:
            self.ctl.send(pickle.dumps(("kill",)))
        except OSError:
            self.close()
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            if self.ctl in self._wait([self.ctl], deadline):
                message = self._receive()
                if message is not None and message[0] == "exited":
                    self.job.exited(message)  # its standard error: where it hung
                    return
                break
        self.close()  # no answer: the helper goes too, and starts afresh for the next point

    # --- plumbing -----------------------------------------------------------------------
    def _wait(self, watched: list, deadline: float) -> list:
        """Those of ``watched`` that are ready by ``deadline``; Interrupted if a signal came."""
        return wait_for(watched, deadline, self.interrupts)

    def _receive(self) -> Optional[tuple]:
        try:
            message = self.ctl.recv(MAX_MESSAGE)
        except OSError:
            return None
        return pickle.loads(message) if message else None


class _Job:
    """The point a runner's worker is measuring."""

    def __init__(self, result: Connection, deadline: float, timeout_s: float):
        self.result, self.deadline, self.timeout_s = result, deadline, timeout_s
        self.reading, self.data, self.code, self.pid, self.stderr = True, None, None, None, ""

    def exited(self, message: tuple) -> None:
        """The helper's ("exited", code, pid, stderr) (older helpers send fewer)."""
        self.code = message[1]
        self.pid = message[2] if len(message) > 2 else None
        said = message[3] if len(message) > 3 else ""
        self.stderr = said if isinstance(said, str) else ""


def wait_for(watched: list, deadline: float, interrupts: Interrupts) -> list:
    """Those of ``watched`` that are ready by ``deadline``; Interrupted if a signal came."""
    wake = interrupts.fileno()
    timeout = min(max(deadline - time.monotonic(), 0.0), MAX_WAIT_S)
    ready = wait(watched + ([wake] if wake is not None else []), timeout)
    interrupts.check()
    return ready


def _crash(code: Optional[int]) -> dict:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        why = f"worker killed by {name}"
        if name == "SIGKILL":
            why += " (the kernel's OOM killer, or an outside kill)"
        return {"status": "crashed", "reason": why}
    return {"status": "crashed", "reason": f"worker exited with code {code} and sent no result"}
