"""The baseline file of the memory gate: read and checked, written atomically. (The run
folder side is ``gate.snapshot``.)

A baseline is a small versioned JSON file kept in git (e.g. ``ci/baseline.json``): the
scenario and device it was made on and, per point, the identity fields and the figures
the gate compares. Points are written one per line, sorted, so a refreshed baseline
diffs readably in review. Everything that makes a side unreadable raises ``GateError``
with a one-line message (exit 2): the gate never passes on data it could not read.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from attnprof.profiler import safeio
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.snapshot import (UNREADABLE, Snapshot, check_point, invalid, point_label,
                                             point_of_record, printable, read_run, require_ok_point)
from attnprof.profiler.records import IDENTITY_FIELDS, key_of_record, with_identity_defaults
from attnprof.profiler.units import strict_json

__all__ = ["FIGURE_FIELDS", "FORMAT", "IDENTITY_FIELDS", "VERSION", "GateError", "Snapshot", "baseline_document",
           "dump_baseline", "point_label", "point_of_record", "printable", "read_baseline", "read_run",
           "require_ok_point", "update_baseline"]

FORMAT = "attnprof-baseline"
VERSION = 1
MAX_BASELINE_BYTES = 256 << 20  # a point is ~300 bytes: far more points than any sweep has
FIGURE_FIELDS = ("status", "measured_peak_bytes", "measured_by", "predicted_peak_bytes", "time_ms")


def _point_lines(text: str, count: int) -> dict:
    """Point index -> line number, when the file has the layout ``dump_baseline`` writes
    (one point per line after ``"points": [``); {} for any other layout."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == '"points": ['), None)
    if start is None or len(lines) < start + 1 + count or not all(
            lines[start + 1 + i].lstrip().startswith("{") for i in range(count)):
        return {}
    return {i: start + 2 + i for i in range(count)}


def read_baseline(path: str | Path, skip_invalid: bool = False) -> Snapshot:
    """A baseline file, fully validated: format, version, scenario, device, points. An
    invalid point is a GateError naming it (and its line), unless ``skip_invalid``: then
    it is left out and listed in ``Snapshot.skipped``."""
    path = Path(path)
    if not path.exists():
        raise GateError(f"baseline not found: {path} (create it with: attnprof gate --update --baseline {path} RUN_DIR)")
    _refuse_unless_a_file(path)
    try:
        raw = safeio.read_bounded(path, MAX_BASELINE_BYTES, follow=True)  # never blocks, never reads /dev/zero
    except safeio.LinkRefused:  # before ValueError: a UserError is one
        raise GateError(f"baseline {path} is not a regular file") from None
    except ValueError:
        raise GateError(f"baseline {path} is larger than {MAX_BASELINE_BYTES >> 20} MiB: not an attnprof baseline") from None
    except OSError as exc:
        raise GateError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    text = ""
    try:
        if raw is None:
            raise FileNotFoundError(errno.ENOENT, "no such file")
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except OSError as exc:
        raise GateError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GateError(f"baseline {path} is corrupt: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        why = "is empty" if not text.strip() else (
            f"is not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno} column {exc.colno}")
        raise GateError(f"baseline {path} {why}") from None
    except UNREADABLE as exc:
        raise GateError(f"baseline {path} is corrupt: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise GateError(f"{path} is not an attnprof baseline (format {printable(repr(found))[:60]}, expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise GateError(f"baseline {path} has version {printable(repr(doc.get('version')))[:60]}; "
                        f"this attnprof reads version {VERSION}")
    scenario, points = doc.get("scenario"), doc.get("points")
    if not isinstance(scenario, dict) or not scenario.get("name"):
        raise GateError(f"baseline {path} is malformed: it names no scenario")
    if not isinstance(points, list) or not points:
        raise GateError(f"baseline {path} is malformed: it holds no points")
    for name in ("device", "device_name"):
        if doc.get(name) is not None and not isinstance(doc.get(name), str):
            raise GateError(f"baseline {path} is malformed: {name} must be a string")
    snap = Snapshot(str(path), scenario, doc.get("device") or "", doc.get("device_name") or "")
    lines = _point_lines(text, len(points))
    for i, point in enumerate(points):
        where = f"{path} point {i}" + (f" (line {lines[i]})" if i in lines else "")
        try:
            if isinstance(point, dict):
                point = with_identity_defaults(point)  # a baseline from before a later field means its default
            if not isinstance(point, dict) or any(f not in point for f in IDENTITY_FIELDS + FIGURE_FIELDS):
                raise GateError(f"{where} lacks identity or figure fields")
            check_point(point, where)
        except GateError as exc:
            snap.skipped.append(str(exc))
            continue
        key = key_of_record(point)
        if key in snap.points:
            raise GateError(f"baseline {path} is malformed: point {point_label(point)} appears twice")
        snap.points[key] = point
    if snap.skipped and not skip_invalid:
        raise invalid(snap.skipped, f"baseline {path}")
    if not snap.points:
        raise GateError(f"baseline {path} holds no valid point ({len(snap.skipped)} invalid point(s) skipped)")
    return snap


def _sort_key(key: tuple) -> tuple:
    """Order points by identity; None sorts first without comparing None with a value."""
    return tuple((v is not None, v if v is not None else 0) for v in key)


def baseline_document(run: Snapshot) -> dict:
    """The baseline made from a run: its scenario, device and, per point, identity + figures."""
    keys = sorted(run.points, key=_sort_key)
    return {"format": FORMAT, "version": VERSION, "scenario": run.scenario,
            "device": run.device, "device_name": run.device_name, "created_from": run.source,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "points": [{f: run.points[k][f] for f in IDENTITY_FIELDS + FIGURE_FIELDS} for k in keys]}


def dump_baseline(doc: dict) -> str:
    """JSON text with one point per line: readable diffs when the baseline is refreshed."""
    head = strict_json({k: v for k, v in doc.items() if k != "points"}, indent=2)
    rows = ",\n".join("    " + strict_json(p) for p in doc["points"])
    return head[:-2] + ',\n  "points": [\n' + rows + "\n  ]\n}\n"


def _refuse_unless_a_file(path: Path) -> None:
    """A baseline is a regular file: a folder, a FIFO or a device there (/dev/zero) is neither
    read as a missing baseline nor replaced by ``--update``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GateError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else (
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise GateError(f"baseline {path} is {kind}, not a baseline file; name a file")


def update_baseline(baseline_path: str | Path, run_dir: str | Path, skip_invalid: bool = False) -> dict:
    """Write (or refresh) the baseline from a run. Atomic: a temp file in the same folder,
    fsynced, then renamed over the old one, so a kill never leaves a truncated baseline.
    A run with an invalid record is refused unless ``skip_invalid`` (then the document's
    ``skipped_invalid`` says how many were left out)."""
    _refuse_unless_a_file(Path(baseline_path))
    run = read_run(run_dir, skip_invalid)
    require_ok_point(run, "run")
    doc = baseline_document(run)
    if run.skipped:
        doc["skipped_invalid"] = len(run.skipped)
    path = Path(baseline_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would make a checked-in file private
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(dump_baseline(doc))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise GateError(f"cannot write baseline {path}: {exc.strerror or exc}") from None
    return doc
