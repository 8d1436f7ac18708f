"""Ctrl-C and SIGTERM during a sweep: remember the signal, wake the sweep, stop at a safe point.

Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread
happens to be, which can be inside a weakref callback or a finalizer: the exception is
then swallowed and printed as "Exception ignored in ..." with a traceback, and the
sweep goes on. Here the handler only records which signal came; the wake-up pipe
(``signal.set_wakeup_fd``) makes any wait of the sweep return at once, and the sweep
checks ``poll()`` between steps and stops cleanly.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Raised by the sweep itself, at a safe point, once a signal was recorded."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class Interrupts:
    """While entered (main thread only), SIGINT and SIGTERM are recorded, not raised.

    Outside the main thread signals cannot be caught; then this does nothing and a
    KeyboardInterrupt still stops the sweep as before.
    """

    def __init__(self):
        self.signum: Optional[int] = None
        self._read = self._write = None
        self._old_handlers: dict = {}
        self._old_wakeup = -1

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._old_wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old_handlers.clear()
        if self._write is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            os.close(self._read)
            os.close(self._write)
            self._read = self._write = None

    def _record(self, signum, frame) -> None:  # must never raise: see the module's docstring
        if self.signum is None:
            self.signum = signum

    def fileno(self) -> Optional[int]:
        """Readable as soon as a signal arrives; None when not catching signals."""
        return self._read

    def poll(self) -> Optional[int]:
        """The first SIGINT/SIGTERM received so far, or None (drains the wake-up pipe)."""
        if self._read is not None:
            try:
                data = os.read(self._read, 512)
            except BlockingIOError:
                data = b""
            for byte in data:  # the C-level handler writes the number before Python's handler runs
                if byte in SIGNALS and self.signum is None:
                    self.signum = byte
        return self.signum

    def check(self) -> None:
        """Raise Interrupted if a signal came: call this only where stopping is safe."""
        if self.poll() is not None:
            raise Interrupted(self.signum)
