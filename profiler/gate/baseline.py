"""Both sides of the memory gate, read and checked: the baseline file and a run folder.

A baseline is a small versioned JSON file kept in git (e.g. ``ci/baseline.json``): the
scenario and device it was made on and, per point, the identity fields and the figures
the gate compares. Points are written one per line, sorted, so a refreshed baseline
diffs readably in review. Everything that makes a side unreadable raises ``GateError``
with a one-line message (exit 2): the gate never passes on data it could not read.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from attnprof.profiler.records import key_of_record, STATUSES
from attnprof.profiler.runner.storage import MANIFEST_FILE, RESULTS_FILE, read_manifest, read_records
from attnprof.errors import UserError

FORMAT = "attnprof-baseline"
VERSION = 1
# The fields of key_of_record(), in its order (tests/profiler/test_gate.py holds the two together).
IDENTITY_FIELDS = ("variant", "mode", "scope", "seq_len", "batch", "d_model", "heads",
                   "layers", "dtype", "ff_mult", "ff_chunks", "forward_only")
FIGURE_FIELDS = ("status", "measured_peak_bytes", "measured_by", "predicted_peak_bytes", "time_ms")


class GateError(UserError):
    """Why a run cannot be gated (exit 2). Always one line: the CLI prints ``error: <msg>``."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@dataclass
class Snapshot:
    """One side of the comparison: where it came from, its scenario and device, its points."""

    source: str  # the baseline file or the run folder, as given
    scenario: dict  # Scenario.to_dict()
    device: str  # "cpu" | "cuda"
    device_name: str  # the device model, e.g. "NVIDIA H200"
    points: dict = field(default_factory=dict)  # key_of_record(point) -> point dict


def point_label(point: dict) -> str:
    """A short name for a point in output: the variant label verbatim, mode, length."""
    where = "attention" if point.get("scope") == "attention" else point.get("mode")
    parts = [str(point.get("variant")), str(where), f"n={point.get('seq_len')}"]
    if point.get("batch") not in (None, 1):
        parts.append(f"b={point.get('batch')}")
    if point.get("forward_only"):
        parts.append("fwd-only")
    return " ".join(parts)


def point_of_record(record: dict) -> dict:
    """The gate's view of a result record: identity plus the compared figures (and the reason)."""
    fwd, bwd = record.get("time_fwd_ms"), record.get("time_bwd_ms")
    return {**{f: record.get(f) for f in IDENTITY_FIELDS},
            "status": record.get("status", "ok"),
            "measured_peak_bytes": record.get("measured_peak_bytes"),
            "measured_by": record.get("measured_by") or "",
            "predicted_peak_bytes": record.get("predicted_peak_bytes"),
            "time_ms": None if fwd is None else fwd + (bwd or 0.0),
            "reason": record.get("reason", "")}


def _check_point(point: dict, where: str) -> None:
    """Types the comparison relies on; a hand-edited or foreign file fails here, not in arithmetic."""
    label = point_label(point)
    if point.get("status") not in STATUSES:
        raise GateError(f"{where}: point {label}: unknown status {point.get('status')!r}")
    for name in ("measured_peak_bytes", "predicted_peak_bytes"):
        value = point.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise GateError(f"{where}: point {label}: {name} must be a byte count or null, got {value!r}")
    time_ms = point.get("time_ms")
    if time_ms is not None and (not isinstance(time_ms, (int, float)) or isinstance(time_ms, bool)):
        raise GateError(f"{where}: point {label}: time_ms must be a number or null, got {time_ms!r}")
    if not isinstance(point.get("measured_by"), str):
        raise GateError(f"{where}: point {label}: measured_by must be a string")


def read_run(run_dir: str | Path) -> Snapshot:
    """A run folder as the gate sees it; the last record of a point wins (as in load_run)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise GateError(f"run folder not found: {path}")
    if not (path / RESULTS_FILE).is_file():
        raise GateError(f"no results in {path}: {RESULTS_FILE} is missing (did the sweep run?)")
    try:
        manifest = read_manifest(path)
        records = [r for r in read_records(path) if isinstance(r, dict)]
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise GateError(f"run {path} is unreadable: {exc}") from None
    if not records:
        raise GateError(f"no results in {path}: {RESULTS_FILE} holds no complete record")
    scenario = manifest.get("scenario") if isinstance(manifest, dict) else None
    if not isinstance(scenario, dict) or not scenario.get("name"):
        raise GateError(f"run {path}: {MANIFEST_FILE} is missing or names no scenario (was it written by attnprof sweep?)")
    env = manifest.get("environment") if isinstance(manifest.get("environment"), dict) else {}
    snap = Snapshot(str(run_dir), scenario, env.get("device") or records[0].get("device") or "",
                    env.get("device_name") or records[0].get("device_name") or "")
    for record in records:
        point = point_of_record(record)
        _check_point(point, f"run {path}")
        snap.points[key_of_record(point)] = point
    return snap


def read_baseline(path: str | Path) -> Snapshot:
    """A baseline file, fully validated: format, version, scenario, device, points."""
    path = Path(path)
    if not path.is_file():
        raise GateError(f"baseline not found: {path} (create it with: attnprof gate --update --baseline {path} RUN_DIR)")
    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
    except UnicodeDecodeError:
        raise GateError(f"baseline {path} is corrupt: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        why = "is empty" if not text.strip() else (
            f"is not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno} column {exc.colno}")
        raise GateError(f"baseline {path} {why}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise GateError(f"{path} is not an attnprof baseline (format {found!r}, expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise GateError(f"baseline {path} has version {doc.get('version')!r}; this attnprof reads version {VERSION}")
    scenario, points = doc.get("scenario"), doc.get("points")
    if not isinstance(scenario, dict) or not scenario.get("name"):
        raise GateError(f"baseline {path} is malformed: it names no scenario")
    if not isinstance(points, list) or not points:
        raise GateError(f"baseline {path} is malformed: it holds no points")
    snap = Snapshot(str(path), scenario, str(doc.get("device") or ""), str(doc.get("device_name") or ""))
    for i, point in enumerate(points):
        if not isinstance(point, dict) or any(f not in point for f in IDENTITY_FIELDS + FIGURE_FIELDS):
            raise GateError(f"baseline {path} is malformed: point {i} lacks identity or figure fields")
        _check_point(point, f"baseline {path}")
        key = key_of_record(point)
        if key in snap.points:
            raise GateError(f"baseline {path} is malformed: point {point_label(point)} appears twice")
        snap.points[key] = point
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
    head = json.dumps({k: v for k, v in doc.items() if k != "points"}, indent=2)
    rows = ",\n".join("    " + json.dumps(p) for p in doc["points"])
    return head[:-2] + ',\n  "points": [\n' + rows + "\n  ]\n}\n"


def update_baseline(baseline_path: str | Path, run_dir: str | Path) -> dict:
    """Write (or refresh) the baseline from a run. Atomic: a temp file in the same folder,
    fsynced, then renamed over the old one, so a kill never leaves a truncated baseline."""
    doc = baseline_document(read_run(run_dir))
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
