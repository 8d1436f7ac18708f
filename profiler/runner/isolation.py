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
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler.runner.interrupts import Interrupts

HELPER_MODULE = "attnprof.profiler.runner.preload"
READY_TIMEOUT_S = 600.0  # importing torch on a loaded machine can take a minute
LINGER_S = 10.0  # a worker that sent its result gets this long to exit before it is killed
KILL_WAIT_S = 5.0  # the helper's answer to a kill; after that the helper itself goes
MAX_WAIT_S = 3600.0  # one wait's longest timeout (select overflows near 2**31 ms)
MAX_MESSAGE = 1 << 20


class HelperError(UserError):
    """The helper process could not start; one line (its own error is printed above it).
    Not the user's mistake: exit code 1, like a failing disk."""

    exit_code = 1


class PointRunner:
    """Runs one point at a time in a fresh worker forked from one warm helper."""

    def __init__(self, interrupts: Optional[Interrupts] = None):
        self.interrupts = interrupts or Interrupts()  # not entered: never fires
        self.helper: Optional[subprocess.Popen] = None
        self.ctl: Optional[socket.socket] = None

    # --- the helper ---------------------------------------------------------------------
    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.helper = subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE, str(os.getpid()), str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
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

    def close(self) -> None:
        """Kill the helper and any worker of it (one process group), and reap the helper."""
        helper, self.helper = self.helper, None
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
        if self.helper is None or self.helper.poll() is not None:
            self.close()
            self._start()
        read_fd, write_fd = os.pipe()
        result = Connection(read_fd, writable=False)
        try:
            try:
                socket.send_fds(self.ctl, [pickle.dumps(("run", point, settings.for_child()))], [write_fd])
            except OSError:
                self.close()
                return {"status": "crashed", "reason": "the measuring helper process died before the point started"}
            finally:
                os.close(write_fd)
            return self._await(result, settings.point_timeout_s)
        except BaseException:
            self.close()
            raise
        finally:
            result.close()

    def _await(self, result: Connection, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        data, code, reading = None, None, True
        while code is None:
            watched = ([result] if reading else []) + [self.ctl]
            ready = self._wait(watched, deadline)
            if reading and result in ready:
                reading = False
                try:
                    data = result.recv()
                except (EOFError, OSError):
                    data = None  # died before sending: the exit code says how
                if data is not None:
                    deadline = min(deadline, time.monotonic() + LINGER_S)
            if self.ctl in ready:
                message = self._receive()
                if message is None:
                    self.close()
                    return data or {"status": "crashed", "reason": "the measuring helper process died during the point"}
                if message[0] == "exited":
                    code = message[1]
            if code is None and time.monotonic() >= deadline:
                self._kill_worker()
                if data is not None:
                    return data  # sent its result, then lingered
                return {"status": "timeout", "reason": f"no result within --point-timeout {timeout_s:g} s; worker killed"}
        return data if data is not None else _crash(code)

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
                    return
                break
        self.close()  # no answer: the helper goes too, and starts afresh for the next point

    # --- plumbing -----------------------------------------------------------------------
    def _wait(self, watched: list, deadline: float) -> list:
        """Those of ``watched`` that are ready by ``deadline``; Interrupted if a signal came."""
        wake = self.interrupts.fileno()
        timeout = min(max(deadline - time.monotonic(), 0.0), MAX_WAIT_S)
        ready = wait(watched + ([wake] if wake is not None else []), timeout)
        self.interrupts.check()
        return ready

    def _receive(self) -> Optional[tuple]:
        try:
            message = self.ctl.recv(MAX_MESSAGE)
        except OSError:
            return None
        return pickle.loads(message) if message else None


def _crash(code: Optional[int]) -> dict:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        why = f"worker killed by {name}"
        if name == "SIGKILL":
            why += " (the kernel's OOM killer, or an outside kill)"
        return {"status": "crashed", "reason": why}
    return {"status": "crashed", "reason": f"worker exited with code {code} and sent no result"}
