"""Ctrl-C and SIGTERM in a command's own process: a KeyboardInterrupt at once, except
while torch's dispatch machinery runs, where it waits for the next safe point.

Python runs a signal handler between any two bytecodes of the main thread, and a handler
that raises puts the KeyboardInterrupt there. Two places make that unsafe (measured: 2 of
60 SIGTERMs at random moments of `attnprof predict --budget 80GiB`, and one CI run):

- inside a dispatch mode's bookkeeping. ``FakeTensor.__torch_dispatch__`` runs
  ``with fake_mode:`` while a C++ guard holds the same mode stashed; a KeyboardInterrupt
  between the mode's set and the ``with`` taking hold leaves it set, the guard's
  destructor finds one already there, throws, and the process aborts (SIGABRT, "trying to
  set the current FakeTensorMode, but one already exists"), every worker's result lost;
- inside a weakref callback (the tracker's free, torch's ``WeakValueDictionary``): Python
  prints "Exception ignored in ..." with a traceback and carries on, the signal lost, the
  command ending with exit 0.

So every run under torch's dispatch modes (a fake or tracked run, a prediction task) is
``deferred()``: a signal inside it is recorded, not raised. The KeyboardInterrupt comes at
a safe point: the region's end, the top of the tracker's next op that returns tensors
(``check``: such an op may raise, as a shape error does; a metadata query such as prim.device
is called from C++ that cannot unwind: raised there, it aborted the process), the next
region's start. A KeyboardInterrupt that a callback swallowed anyway is caught by
``install``'s unraisable hook and is pending again.
A command that ends with a signal received but never raised still says "interrupted"
(``received``).

A sweep swaps these handlers for its own, which only record (runner/interrupts.py); its
workers take SIGTERM's default back (forks.py). For a library caller who installed
nothing, a region on the main thread takes SIGINT for its duration when Python's default
handler holds it, and gives it back.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from typing import Callable, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)

DEPTH = 0  # regions entered and not left (main thread)
PENDING = False  # a signal came inside a region, or its KeyboardInterrupt was swallowed: raise it
RECEIVED: list = []  # every SIGINT/SIGTERM the handler saw, in order (the exit code reads the last)


def handler(signum, frame) -> None:
    """SIGINT and SIGTERM alike: a KeyboardInterrupt now, or at the next safe point inside
    a region."""
    global PENDING
    RECEIVED.append(int(signum))
    if DEPTH:
        PENDING = True
        return
    PENDING = False
    raise KeyboardInterrupt


def check() -> None:
    """Raise the pending KeyboardInterrupt (once), on the main thread (where the signal came);
    call only where an exception is safe."""
    global PENDING
    if PENDING and threading.current_thread() is threading.main_thread():
        PENDING = False
        raise KeyboardInterrupt


def received() -> Optional[int]:
    """The last signal the handler saw, or None."""
    return RECEIVED[-1] if RECEIVED else None


def _unraisable(previous: Callable) -> Callable:
    def hook(unraisable) -> None:
        global PENDING
        if isinstance(unraisable.exc_value, KeyboardInterrupt):  # swallowed in a callback: not lost
            PENDING = True
            return
        previous(unraisable)

    hook.attnprof_safe_points = True
    return hook


def install() -> None:
    """For a command's process (main thread): the handler on SIGINT and SIGTERM, and the
    unraisable hook that keeps a swallowed KeyboardInterrupt pending."""
    for sig in SIGNALS:
        signal.signal(sig, handler)
    if not getattr(sys.unraisablehook, "attnprof_safe_points", False):
        sys.unraisablehook = _unraisable(sys.unraisablehook)


@contextlib.contextmanager
def deferred():
    """A region where SIGINT/SIGTERM wait (see the module docstring): enter it before any
    dispatch mode, leave it after the last one; it raises the pending KeyboardInterrupt
    as it starts and ends (the outermost region only), also in place of another exception
    that ends it (the signal is the caller's answer; none is left for an unrelated call).
    Nests; does nothing off the main thread."""
    global DEPTH
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = DEPTH == 0  # an inner region may sit inside the outer one's modes: only the tracker raises there
    if outermost:
        check()
    took = outermost and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    DEPTH += 1
    try:
        try:
            if took:
                signal.signal(signal.SIGINT, handler)
            yield
        finally:
            _leave(took)
    except Exception:
        if outermost:
            check()  # a signal came: the KeyboardInterrupt, in place of (and chained to) this exception
        raise
    if outermost:
        check()


def _leave(took: bool) -> None:
    """A region's end: Python's SIGINT handler back first (where the region took it), then
    the depth, so a signal in between still finds the region deferring."""
    global DEPTH
    if took:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    DEPTH -= 1


def deferring(fn: Callable) -> Callable:
    """``fn`` run inside ``deferred()``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with deferred():
            return fn(*args, **kwargs)

    return wrapper
