"""How a failed point says what went wrong and where, and how a sweep that measured nothing ends.

On the first lent GPU every point of every CUDA sweep ended ``error`` with a reason that
held CUDA's generic advice, cut, and no word of where in attnprof it happened, and the
sweep exited 0 (../shared/gpu-runs/h200-2026-12-04/README.md; issue 38). So:

- a point's ``reason`` is the exception's type, the first line of its message (CUDA's
  errors are a line of fact then lines of advice) and the innermost attnprof frame,
  ``(at profiler/gpumeasure/allocator_pass.py:52)``;
- the full traceback (chained exceptions included) travels back with the worker's row
  under ``TRACEBACK_KEY``, a key that is no ``PointRecord`` field (a crashed or hung
  worker's standard error, with faulthandler's stacks, under ``STDERR_KEY``:
  runner/worker_stderr.py), and the sweep, the one
  process that writes the run folder, puts it in ``RUN/logs/NAME.log`` (NAME: the point's
  timeline file name, profiler/timeline/files.py, safe for any label) through safeio, never
  through a planted link, and names it in the record's ``error_log``;
- a sweep in which no point of its run folder ended ``ok`` (errors, OOMs, crashes,
  timeouts and skips alike: nothing was measured) is a failed sweep: ``no_point_ok``
  gives its one line, naming the commonest reason; a resumed sweep counts the points it
  kept too.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler import safeio
from attnprof.profiler.failure_text import (MAX_LOG_CHARS, MESSAGE_CHARS, failure_reason, first_line,  # noqa: F401
                                           full_traceback, innermost_frame, ours)
from attnprof.profiler.records import Point, PointRecord
from attnprof.profiler.runner.storage import LOGS_DIR
from attnprof.profiler.units import printable
from attnprof.profiler.timeline.files import file_name

LOG_SUFFIX = ".log"
TRACEBACK_KEY = "traceback_text"  # in a worker's row only; never a field of results.jsonl
STDERR_KEY = "stderr_text"  # a dead or hung worker's standard error (runner/worker_stderr.py); never a field
FAILED = ("error", "oom")  # the statuses an exception in a worker gives
LOGGED = FAILED + ("crashed", "timeout")  # the statuses whose point may leave a log
LOG_KEYS = (TRACEBACK_KEY, STDERR_KEY)  # what a worker's result may carry for the log


def keep_traceback(record: PointRecord, exc: BaseException) -> None:
    """Hold ``exc``'s traceback on the record (an attribute, not a field) for ``row_of``."""
    record.traceback_text = full_traceback(exc)


def row_of(record: PointRecord) -> dict:
    """The row a worker sends back: the record's fields, plus the traceback it holds."""
    row = record.to_row()
    text = getattr(record, "traceback_text", "")
    if text:
        row[TRACEBACK_KEY] = text
    return row


def log_path(run_dir: Path, point: Point) -> Path:
    return Path(run_dir) / LOGS_DIR / (file_name(point) + LOG_SUFFIX)


def write_log(run_dir: Path, point: Point, row: dict) -> dict:
    """``row`` without its traceback or its dead worker's standard error (LOG_KEYS), which go
    to RUN/logs/NAME.log (``error_log`` names it, relative to the run folder); a log that
    cannot be written is said in the reason, and the record is kept either way."""
    row = dict(row)
    parts = [row.pop(TRACEBACK_KEY, None), row.pop(STDERR_KEY, None)]
    if parts[1]:
        parts[1] = "the worker's standard error:\n" + parts[1]
    text = "\n".join(p for p in parts if isinstance(p, str) and p)
    if not text or row.get("status") not in LOGGED:
        return row
    path = log_path(run_dir, point)
    header = f"point: {point.key_text()}\nstatus: {row.get('status')}\nreason: {row.get('reason', '')}\n\n"
    try:
        safeio.make_folder(path.parent)
        # line by line, every control character spelled out (an ESC from a plug-in's message: `cat` must not run it)
        lines = "\n".join(printable(line) for line in (header + text).split("\n"))
        safeio.write_atomic(path, lines.encode("utf-8", "backslashreplace"))
    except (OSError, UserError) as exc:  # safeio: LinkRefused, UnwritablePath
        problem = getattr(exc, "strerror", None) or first_line(exc) or type(exc).__name__
        row["reason"] = "; ".join(filter(None, (row.get("reason"), f"traceback not kept: {problem}")))
        return row
    row["error_log"] = path.relative_to(run_dir).as_posix()
    return row


def _family(reason: str) -> str:
    """A reason with its figures blanked: points that failed alike at different lengths or
    sizes count as one reason ("predicted peak 2.0 GiB exceeds ..." and "... 8.0 GiB ...")."""
    return re.sub(r"\d+(?:\.\d+)?", "#", reason)


def no_point_ok(records: list) -> Optional[str]:
    """One line when no record ended ``ok`` (None otherwise): how many, by status, and the
    commonest reason (the first point's words for it, with how many points gave it)."""
    if any(r.get("status") == "ok" for r in records):
        return None
    if not records:
        return "no point ended ok: the sweep recorded no point"
    statuses = Counter(r.get("status") or "?" for r in records)
    reasons = [r.get("reason") or "no reason given" for r in records]
    families = Counter(_family(reason) for reason in reasons)
    family, count = families.most_common(1)[0]
    example = next(reason for reason in reasons if _family(reason) == family)
    by_status = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    return f"no point ended ok ({by_status}); the commonest reason ({count} of {len(records)}): {example}"
