"""Before ``--resume`` appends: invalid lines of results.jsonl are moved aside, never deleted.

A run folder may hold lines that are not records: a torn last line (a kill mid-write),
a line another tool or a person edited, or a file that is not a results file at all
(``--out`` pointed at the wrong folder). Resume must append after valid records only,
but it must not lose a byte of anything else:

- every line that fails ``schema.parse_line`` is moved, byte for byte, to
  ``results.quarantine.jsonl`` beside it: one JSON object per line with its original
  line number, the reason, whether it ended in a newline and its exact bytes (base64);
- results.jsonl then keeps its valid records (and blank lines) in their order, rewritten
  atomically after the quarantine is on disk: a kill between the two loses nothing (the
  next resume quarantines the same lines again);
- a file with no valid record that holds more than one torn line is refused
  (``resume_problem``): it is not a run attnprof can complete, and emptying it would be
  deleting someone's data.

The original file is the results lines and the quarantined lines merged back by line
number (``tests/profiler/runner/test_quarantine.py`` reconstructs it that way).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from attnprof.profiler import safeio
from attnprof.profiler.runner.errors import StorageError, SweepError
from attnprof.profiler.runner.schema import parse_line
from attnprof.profiler.runner.storage import MAX_RESULTS_BYTES, QUARANTINE_FILE, RESULTS_FILE

QUARANTINE_FORMAT = "attnprof-quarantine"
SHOWN_LINES = 8  # line numbers named in the one-line note; the rest as a count


@dataclass
class Bad:
    """One line that is not a record: 1-based number, its bytes (without the newline)."""

    line: int
    raw: bytes
    reason: str
    newline: bool  # False only for a torn last line


@dataclass
class Scan:
    kept: list = field(default_factory=list)  # bytes of each kept line, newline included
    bad: list = field(default_factory=list)  # Bad
    valid: int = 0
    added_newline: bool = False  # a valid last record lacked its newline


def scan(data: bytes) -> Scan:
    """Sort the lines of a results file into kept (valid or blank) and bad."""
    out = Scan()
    start, number = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        newline = end >= 0
        end = end if newline else len(data)
        raw, number = data[start:end], number + 1
        start = end + 1
        if not raw.strip():
            out.kept.append(raw + b"\n" if newline else raw)
            continue
        record, reason = parse_line(raw)
        if record is None:
            out.bad.append(Bad(number, raw, reason if newline else f"torn last line (no newline): {reason}", newline))
        else:
            out.valid += 1
            out.added_newline = out.added_newline or not newline
            out.kept.append(raw + b"\n")
    return out


def _read(run_dir: Path) -> Optional[bytes]:
    path = Path(run_dir) / RESULTS_FILE
    try:
        return safeio.read_bounded(path, MAX_RESULTS_BYTES)
    except ValueError:
        raise SweepError(f"{path} is larger than {MAX_RESULTS_BYTES >> 20} MiB: not a results file; "
                         f"choose another --out") from None
    except OSError as exc:
        raise SweepError(f"cannot read {path}: {exc.strerror or exc}") from None


def problem_of(run_dir: Path, found: Scan) -> Optional[str]:
    """Why a folder cannot be resumed, or None: no valid record, and more than one torn line."""
    if found.valid or not found.bad or (len(found.bad) == 1 and not found.bad[0].newline):
        return None
    path = Path(run_dir) / RESULTS_FILE
    return (f"{path} holds no valid record ({len(found.bad)} invalid line(s), first: line {found.bad[0].line}: "
            f"{found.bad[0].reason}); it is not a run attnprof can resume, and it is left as it is: "
            f"move it away or choose another --out")


def resume_problem(run_dir: Path) -> Optional[str]:
    """``problem_of`` the folder's results file as it is now (None when there is none)."""
    data = _read(run_dir)
    return None if data is None else problem_of(run_dir, scan(data))


def entry(bad: Bad, at: str) -> bytes:
    doc = {"format": QUARANTINE_FORMAT, "from": RESULTS_FILE, "line": bad.line, "reason": bad.reason,
           "newline": bad.newline, "bytes": len(bad.raw), "raw_base64": base64.b64encode(bad.raw).decode("ascii"),
           "quarantined_at": at}
    return (json.dumps(doc) + "\n").encode("utf-8")


def quarantine_invalid(run_dir: Path) -> Optional[str]:
    """Move every invalid line of results.jsonl to results.quarantine.jsonl; return a
    one-line note of what moved (None when the file was fine). SweepError for a folder
    ``problem_of`` refuses; StorageError when the disk refuses the write."""
    run_dir = Path(run_dir)
    data = _read(run_dir)
    if not data:
        return None
    found = scan(data)
    problem = problem_of(run_dir, found)
    if problem:
        raise SweepError(problem)
    path, aside = run_dir / RESULTS_FILE, run_dir / QUARANTINE_FILE
    if not found.bad and not found.added_newline:
        return None
    try:
        if found.bad:
            at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            _append_all(aside, b"".join(entry(b, at) for b in found.bad))
        safeio.write_atomic(path, b"".join(found.kept), durable=True)
    except OSError as exc:
        raise StorageError(f"cannot move invalid lines of {path} aside: {exc.strerror or exc}; "
                           f"nothing was removed") from None
    if not found.bad:
        return f"repaired {path}: added the newline its last record lacked"
    lines = [b.line for b in found.bad]
    shown = ", ".join(map(str, lines[:SHOWN_LINES])) + (f" and {len(lines) - SHOWN_LINES} more"
                                                         if len(lines) > SHOWN_LINES else "")
    return (f"warning: moved {len(lines)} invalid line(s) of {path} (line {shown}; first: {found.bad[0].reason}) "
            f"to {aside}, byte for byte; results.jsonl keeps its {found.valid} valid record(s)")


def _append_all(path: Path, data: bytes) -> None:
    fd = safeio.open_append(path)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(28, os.strerror(28))  # ENOSPC
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)

