"""Run-folder I/O: append records as points finish, read them back, load a DataFrame.

A run folder holds ``results.jsonl`` (one record per line, appended and flushed as each
point finishes) and ``manifest.json`` (configuration and environment). It is data
from outside, so reading never crashes and never trusts it (``schema``), and writing
never leaves half a record behind:

- one writer: a sweep holds ``flock`` on ``.sweep.lock`` for its whole run;
- each record is one ``os.write`` of the full line; a failed write (disk full) is
  truncated back, so the file stays valid up to its last complete record;
- before ``--resume`` appends, invalid lines (a torn last one, an edited one) are moved
  to ``results.quarantine.jsonl``, never deleted (``quarantine``);
- nothing is written through a planted link: the lock and the results file are opened
  with O_NOFOLLOW and must be regular files with one name (``profiler.safeio``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from attnprof.profiler import safeio
from attnprof.profiler.records import PointRecord, key_of_record
from attnprof.profiler.runner.errors import StorageError, SweepError
from attnprof.profiler.runner.schema import parse_line
from attnprof.profiler.units import strict_json

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".sweep.lock"
QUARANTINE_FILE = "results.quarantine.jsonl"  # invalid lines moved aside on resume (quarantine.py)
# Every file (and folder) a sweep writes into its run folder, and the temporary file of the manifest
LOGS_DIR = "logs"  # a failed point's full traceback: RUN/logs/NAME.log (failures.py)
WRITTEN_FILES = (RESULTS_FILE, MANIFEST_FILE, MANIFEST_FILE + ".tmp", LOCK_FILE, QUARANTINE_FILE,
                 RESULTS_FILE + ".tmp", LOGS_DIR)
MAX_MANIFEST_BYTES = 16 << 20
_MANIFEST_SECTIONS = ("scenario", "settings", "environment")


class RunFolderBusy(Exception):
    """Another process holds the run folder's lock; ``holder`` is its pid as it wrote it."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


@dataclass(frozen=True)
class Problem:
    """One line of results.jsonl that is not a valid record (line 0: the file as a whole)."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}" if self.line else self.reason


# --- writing --------------------------------------------------------------------------------
def acquire_lock(run_dir: Path) -> int:
    """Take the folder's writer lock without waiting; the fd holds it until ``release_lock``.

    ``flock`` is released by the kernel when the holder dies, SIGKILL included, so a
    crashed sweep never leaves the folder locked. A lock file that is a link is refused
    (``safeio.LinkRefused``): the pid written into it would land in the link's target.
    """
    fd = safeio.open_lock(Path(run_dir) / LOCK_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise RunFolderBusy(holder) from None
    except OSError:
        os.close(fd)
        raise
    try:  # who holds it, for the next writer's message; cosmetic, so a full disk is no error
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    return fd


def refuse_planted_links(run_dir: Path) -> None:
    """LinkRefused (one line, exit 2) when a file a sweep writes is a symbolic link (or, for
    the files appended to or locked, a hard link or not a regular file): checked before
    the banner, so a folder from outside is refused before anything runs."""
    for name in WRITTEN_FILES:
        safeio.refuse_link(Path(run_dir) / name, opened=name in (RESULTS_FILE, LOCK_FILE, QUARANTINE_FILE))


def release_lock(fd: int) -> None:
    os.close(fd)  # closing the last fd releases the flock


def append_record(run_dir: Path, record) -> None:
    """Append one record (a PointRecord or its row) as one line, on disk before returning.

    The whole line goes in one ``os.write`` (O_APPEND): a kill lands before or after it.
    If the write or the fsync fails, the file is truncated back to its size before,
    and StorageError says so in one line. A results file that is a link is refused.
    """
    path = Path(run_dir) / RESULTS_FILE
    row = record.to_row() if isinstance(record, PointRecord) else dict(record)
    line = (strict_json(row) + "\n").encode("utf-8")  # a figure that is not finite: null and why
    try:
        fd = safeio.open_append(path)
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(line)
            while view:  # a regular file takes it all at once; a short write means the disk is full
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise _write_error(path, exc) from None
    finally:
        os.close(fd)


def _write_error(path: Path, exc: OSError) -> StorageError:
    return StorageError(f"cannot write {path}: {exc.strerror or exc}; every record before it is kept: "
                        f"free space and complete the run with --resume")


def _line_spans(data: bytes):
    """(start, end) of each line, end excluding its newline."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield start, end
        start = end + 1


def results_size(run_dir: Path) -> int:
    path = Path(run_dir) / RESULTS_FILE
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --- reading --------------------------------------------------------------------------------
# A record is 1-20 KiB (its timing samples): 25,000 points and more; beyond, not a results file. Read whole
# (and decoded) by resume, report, gate and export alike: 4 GiB ran a report out of memory.
MAX_RESULTS_BYTES = 512 << 20
def read_records_checked(run_dir: Path) -> tuple[list[dict], list[Problem]]:
    """Every valid record of a run, and a Problem for each line that is not one.

    Never raises for what the file holds: binary data, non-objects, wrong types,
    missing fields, absurd nesting all become a Problem naming the line.
    """
    numbered, problems = read_numbered(run_dir)
    return [record for _, record in numbered], problems


def read_numbered(run_dir: Path) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """``read_records_checked`` with each record's line number: (line, record) pairs."""
    path = Path(run_dir) / RESULTS_FILE
    try:
        # never through a link (its target's bytes would be copied into the quarantine), never
        # blocking on a FIFO, never reading /dev/zero until memory runs out: LinkRefused, exit 2
        data = safeio.read_bounded(path, MAX_RESULTS_BYTES)
    except safeio.LinkRefused:
        raise  # a UserError, and so a ValueError: not the size below
    except OSError as exc:
        return [], [Problem(0, f"cannot read {path}: {exc.strerror or exc}")]
    except ValueError:
        raise SweepError(f"{path} is larger than {MAX_RESULTS_BYTES >> 20} MiB: not a results file attnprof "
                           f"wrote (over 25,000 points); refused") from None
    if data is None:
        return [], []
    records, problems = [], []
    for line_no, (start, end) in enumerate(_line_spans(data), 1):
        raw = data[start:end]
        if not raw.strip():
            continue
        record, reason = parse_line(raw)
        if record is None:
            problems.append(Problem(line_no, reason))
        else:
            records.append((line_no, record))
    return records, problems


def read_records(run_dir: Path) -> list[dict]:
    """The valid records of a run (invalid lines, e.g. a torn last one, are left out)."""
    return read_records_checked(run_dir)[0]


def load_run(run_dir: str | Path):
    """A run as a tidy pandas DataFrame, one row per point (the last record wins)."""
    import pandas as pd

    latest: dict = {}
    for rec in read_records(Path(run_dir)):
        latest[key_of_record(rec)] = rec
    frame = pd.DataFrame(list(latest.values()))
    if not frame.empty:
        frame = frame.sort_values(["scope", "mode", "variant", "seq_len"], kind="stable").reset_index(drop=True)
    return frame


def read_manifest_checked(run_dir: Path) -> tuple[dict, Optional[str]]:
    """manifest.json as a dict, and why it is not usable (or None).

    A broken manifest reads as ``{}``; a section (scenario, settings, environment) that
    is not an object is dropped. Nothing in it is ever imported or executed.
    """
    path = Path(run_dir) / MANIFEST_FILE
    try:
        raw = safeio.read_bounded(path, MAX_MANIFEST_BYTES)  # a FIFO or a link: refused, never read
        if raw is None:
            return {}, None
        data = json.loads(raw.decode("utf-8"))
    except safeio.LinkRefused:
        return {}, f"{path} is a link or not a regular file"
    except OSError as exc:
        return {}, f"cannot read {path}: {exc.strerror or exc}"
    except UnicodeDecodeError:
        return {}, f"{path} is not UTF-8 text"
    except RecursionError:
        return {}, f"{path} is nested too deeply"
    except ValueError as exc:  # JSONDecodeError, or larger than the bound
        return {}, f"{path} is not valid JSON ({getattr(exc, 'msg', exc)})" if hasattr(exc, "msg") else \
            f"{path} is too large to be a manifest"
    if not isinstance(data, dict):
        return {}, f"{path} is not a JSON object"
    bad = [k for k in _MANIFEST_SECTIONS if k in data and not isinstance(data[k], dict)]
    for key in bad:
        del data[key]
    return data, (f"{path}: {bad[0]} is not an object" if bad else None)


def read_manifest(run_dir: Path) -> dict:
    """manifest.json, or ``{}`` when it is missing or unusable (see read_manifest_checked)."""
    return read_manifest_checked(run_dir)[0]
