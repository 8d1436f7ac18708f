"""Tie a child process's life to its parent's: when the parent dies, however it dies
(SIGKILL included, which no handler can see), the kernel kills the child.

The sweep is a chain: main process -> warm helper -> one worker per point. Each link
calls ``die_with_parent`` first thing, so killing the main process takes the whole
chain down and nothing keeps holding memory, a GPU, or the terminal's pipes.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

try:  # loaded once, in the helper, before any fork: no dlopen in a forked child
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PRCTL = _LIBC.prctl
except (OSError, AttributeError):  # not Linux: the helper's end-of-input check still applies
    _PRCTL = None


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux
    ``PR_SET_PDEATHSIG``), then close the race: a parent that died before the call
    has already re-parented us, so ``getppid`` no longer names it and we exit now.

    The signal is tied to the parent *thread* that forked us and is cleared by fork,
    so each link of the chain must call this itself.
    """
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)
