"""How an exception reads in one line, and where in attnprof it happened (issue 38).

``failure_reason`` is ``Type: first line of the message (at file:line)``: CUDA's errors are a
line of fact then lines of advice, so only the first line is kept, and the innermost frame
inside attnprof names where. A sweep's failed point (profiler/runner/failures.py) and a
prediction that failed (``attnprof predict``, profiler/predict) say it the same way.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Optional

MESSAGE_CHARS = 240  # of the first line of an exception's message, in a reason
MAX_LOG_CHARS = 256 * 1024  # a traceback longer than this is cut (its end kept: the innermost frames)
_ROOT = Path(__file__).resolve().parents[1]  # the attnprof package: the repository root


def first_line(exc: BaseException) -> str:
    """The first non-blank line of the message, spaces collapsed, cut at MESSAGE_CHARS."""
    for line in str(exc).splitlines():
        text = " ".join(line.split())
        if text:
            return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 3] + "..."
    return ""


def ours(filename: str) -> Optional[str]:
    """``filename`` relative to the attnprof package, or None for a file outside it (torch,
    the standard library, a plug-in) or inside one of its hidden folders (its .venv)."""
    try:
        relative = Path(filename).resolve().relative_to(_ROOT)
    except (ValueError, OSError, RuntimeError):
        return None
    if any(part.startswith(".") or part == "site-packages" for part in relative.parts):
        return None
    return relative.as_posix()


def innermost_frame(exc: BaseException) -> Optional[str]:
    """``file:line`` of the innermost frame of ``exc``'s traceback inside attnprof."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        where = ours(frame.filename)
        if where is not None:
            found = f"{where}:{frame.lineno}"
    return found


def failure_reason(exc: BaseException) -> str:
    """``Type: first line of the message (at file:line)``: one line, for a point's reason."""
    message = first_line(exc)
    where = innermost_frame(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return f"{text} (at {where})" if where else text


def full_traceback(exc: BaseException) -> str:
    """The whole traceback, causes and contexts included, its end kept if too long."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text if len(text) <= MAX_LOG_CHARS else "[... cut ...]\n" + text[-MAX_LOG_CHARS:]
