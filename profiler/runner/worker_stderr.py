"""What a worker wrote to its standard error, kept for the point it measured (issue 38).

A worker that raised sends its traceback with its row (runner/failures.py). One that
*died* (a segfault in a CUDA library, the OOM killer, an abort) or *hung* sent nothing:
before this, its point's record said only "worker killed by SIGSEGV" and whatever it had
printed went to the terminal, mixed with the sweep's progress, and was lost to the run
folder. So:

- the helper gives each worker a standard error of its own, an unlinked temporary file
  (``capture_file``; the system's temporary folder, never the run folder: nothing there
  can be a planted link), and the worker turns on ``faulthandler``, which writes every
  thread's Python stack there on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT, and on
  ``DUMP_SIGNAL`` (SIGUSR1) without dying;
- a point past its ``--point-timeout`` is sent ``DUMP_SIGNAL`` first (its stacks are written:
  where it hung), then SIGKILL ``DUMP_GRACE_S`` later (preload.watch);
- when the worker has exited the helper reads the file's last ``TAIL_BYTES``
  (``read_tail``) and sends it with the exit code; a worker that exited 0 has it echoed to
  the sweep's standard error as before (a library's warning); any other exit keeps it out
  of the terminal: it goes, under ``failures.STDERR_KEY``, into the point's log RUN/logs/NAME.log
  (failures.write_log), and the record's reason names the innermost attnprof frame of the
  dump (``where``), as an exception's reason does.
"""

from __future__ import annotations

import re
import signal
import tempfile
from typing import Optional

TAIL_BYTES = 64 * 1024  # of a worker's standard error, kept (its end: the last words before it died)
# A hung worker is asked for its stacks with SIGUSR1 (faulthandler.register in the worker: it writes
# them and goes on; not SIGABRT, whose default action after faulthandler's dump is a core dump of a
# process that may map tens of GiB of GPU memory), then SIGKILLed this long after.
DUMP_SIGNAL = signal.SIGUSR1
DUMP_GRACE_S = 1.0
# faulthandler's frame lines: '  File "/path/x.py", line 12 in name' (most recent call first)
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")  # a stack's first line


def capture_file():
    """A fresh, unlinked temporary file for one worker's standard error (None if none can be made)."""
    try:
        return tempfile.TemporaryFile()
    except OSError:
        return None


def read_tail(handle) -> str:
    """The last TAIL_BYTES of what was written to ``handle`` (decoded, undecodable bytes
    escaped), with a first line saying how much was cut; "" when nothing was written or it
    cannot be read."""
    if handle is None:
        return ""
    try:
        size = handle.seek(0, 2)
        start = max(0, size - TAIL_BYTES)
        handle.seek(start)
        data = handle.read()
    except (OSError, ValueError):
        return ""
    text = data.decode("utf-8", "backslashreplace")
    if start:
        text = f"[... the first {start} bytes cut ...]\n" + text
    return text


def where(text: str) -> Optional[str]:
    """``file:line`` of the innermost attnprof frame in a faulthandler dump: of the thread
    it marks current (the one that crashed; for DUMP_SIGNAL the main thread, where a hung
    point waits), else of the first thread dumped. None when that stack names no attnprof frame."""
    from attnprof.profiler.runner.failures import ours

    stacks: list = []  # (current?, [frame lines])
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            stacks.append((head.group(1) == "Current thread", []))
        elif stacks and _FRAME.match(line):
            stacks[-1][1].append(line)
    chosen = next((frames for current, frames in stacks if current), stacks[0][1] if stacks else [])
    for line in chosen:  # most recent call first: the first of ours is the innermost
        m = _FRAME.match(line)
        mine = ours(m.group(1))
        if mine is not None:
            return f"{mine}:{m.group(2)}"
    return None


def with_where(reason: str, text: str) -> str:
    """``reason`` with `` (at file:line)`` from the dump in ``text`` when it names an attnprof frame."""
    found = where(text) if text else None
    return f"{reason} (at {found})" if found else reason
