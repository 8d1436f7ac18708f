"""One side of the memory gate as the gate sees it: a ``Snapshot`` of points, each point
a result record's identity and compared figures, checked before use; and reading a run
folder into one. Every problem is a one-line ``GateError`` (exit 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.profiler.gate.checks import record_problem
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.records import IDENTITY_FIELDS, key_of_record, later_label, step_time_ms
from attnprof.profiler.runner.storage import MANIFEST_FILE, RESULTS_FILE, read_manifest, read_numbered
from attnprof.profiler.units import printable  # noqa: F401 - the gate's modules import it from here

# What the gate reads of a result record: identity, outcome and the figures it compares.
RECORD_FIELDS = IDENTITY_FIELDS + ("status", "reason", "measured_peak_bytes", "measured_by",
                                   "predicted_peak_bytes", "time_fwd_ms", "time_bwd_ms", "device", "device_name")


@dataclass
class Snapshot:
    """One side of the comparison: where it came from, its scenario and device, its points."""

    source: str  # the baseline file or the run folder, as given
    scenario: dict  # Scenario.to_dict()
    device: str  # "cpu" | "cuda"
    device_name: str  # the device model, e.g. "NVIDIA H200"
    points: dict = field(default_factory=dict)  # key_of_record(point) -> point dict
    skipped: list = field(default_factory=list)  # "FILE line N: why" of each invalid record left out (--skip-invalid)

    @property
    def ok_points(self) -> int:
        return sum(1 for p in self.points.values() if p.get("status") == "ok")


def point_label(point: dict) -> str:
    """A short name for a point in output: the variant label verbatim, mode, length."""
    where = "attention" if point.get("scope") == "attention" else point.get("mode")
    parts = [str(point.get("variant")), str(where), f"n={point.get('seq_len')}"]
    if point.get("batch") not in (None, 1):
        parts.append(f"b={point.get('batch')}")
    if point.get("forward_only"):
        parts.append("fwd-only")
    if later_label(point):
        parts.append(later_label(point))
    return printable(" ".join(parts))


def point_of_record(record: dict) -> dict:
    """The gate's view of a (checked) result record: identity plus the compared figures."""
    return {**{f: record.get(f) for f in IDENTITY_FIELDS},
            "status": record["status"],
            "measured_peak_bytes": record.get("measured_peak_bytes"),
            "measured_by": record.get("measured_by") or "",
            "predicted_peak_bytes": record.get("predicted_peak_bytes"),
            "time_ms": step_time_ms(record.get("time_fwd_ms"), record.get("time_bwd_ms")),
            "reason": record.get("reason") or ""}


def check_point(point: dict, where: str) -> None:
    """Types the comparison relies on; a hand-edited or foreign file fails here, not in arithmetic."""
    problem = record_problem(point, IDENTITY_FIELDS + ("status", "measured_peak_bytes", "predicted_peak_bytes",
                                                       "measured_by"))
    time_ms = point.get("time_ms")
    if problem is None and time_ms is not None and (
            isinstance(time_ms, bool) or not isinstance(time_ms, (int, float)) or not math.isfinite(time_ms)):
        problem = f"time_ms must be a finite number or null, got {time_ms!r}"
    if problem:
        label = point_label(point) if isinstance(point, dict) else "?"
        raise GateError(f"{where}: point {label}: {problem}")


# What reading hostile JSON can raise besides OSError: bad text or syntax (ValueError:
# JSONDecodeError, UnicodeDecodeError), nesting too deep (RecursionError), absurd sizes.
UNREADABLE = (ValueError, RecursionError, MemoryError, TypeError)


def _read_or_refuse(path: Path, name: str, read):
    """``read(path)``, or a GateError naming the file when it cannot be read or decoded."""
    try:
        return read(path)
    except OSError as exc:
        raise GateError(f"run {path}: cannot read {name}: {exc.strerror or exc}") from None
    except UNREADABLE as exc:
        raise GateError(f"run {path}: {name} is unreadable: {type(exc).__name__}: {exc}") from None


SKIP_HINT = "the gate never passes on a record it cannot read: fix or remove it, or pass --skip-invalid"


def invalid(skipped: list, what: str) -> GateError:
    """Not comparable: the first invalid record named, the rest counted."""
    more = f" (and {len(skipped) - 1} more invalid record(s))" if len(skipped) > 1 else ""
    return GateError(printable(f"{what} holds an invalid record: {skipped[0]}{more}; {SKIP_HINT}"))


def read_run(run_dir: str | Path, skip_invalid: bool = False) -> Snapshot:
    """A run folder as the gate sees it; the last record of a point wins (as in load_run).
    A line that is not a valid record is a GateError naming file and line, unless
    ``skip_invalid``: then it is left out and listed in ``Snapshot.skipped``."""
    path = Path(run_dir)
    if not path.is_dir():
        raise GateError(f"run folder not found: {path}")
    if not (path / RESULTS_FILE).is_file():
        raise GateError(f"no results in {path}: {RESULTS_FILE} is missing (did the sweep run?)")
    numbered, problems = _read_or_refuse(path, RESULTS_FILE, read_numbered)
    if problems and problems[0].line == 0:
        raise GateError(f"run {path}: {problems[0]}")
    manifest = _read_or_refuse(path, MANIFEST_FILE, read_manifest)
    skipped = [f"{path / RESULTS_FILE} line {p.line}: {p.reason}" for p in problems]
    records = []
    for line, record in numbered:
        problem = record_problem(record, RECORD_FIELDS)
        if problem:
            skipped.append(f"{path / RESULTS_FILE} line {line} ({point_label(record)}): {problem}")
        else:
            records.append(record)
    if skipped and not skip_invalid:
        raise invalid(skipped, f"run {path}")
    if not records:
        raise GateError(f"no results in {path}: {RESULTS_FILE} holds no complete record"
                        + (f" ({len(skipped)} invalid record(s) skipped)" if skipped else ""))
    scenario = manifest.get("scenario") if isinstance(manifest, dict) else None
    if not isinstance(scenario, dict) or not scenario.get("name"):
        raise GateError(f"run {path}: {MANIFEST_FILE} is missing or names no scenario (was it written by attnprof sweep?)")
    env = manifest.get("environment") if isinstance(manifest.get("environment"), dict) else {}
    for name in ("device", "device_name"):
        if env.get(name) is not None and not isinstance(env.get(name), str):
            raise GateError(f"run {path}: {MANIFEST_FILE} is malformed: environment.{name} must be a string")
    snap = Snapshot(str(run_dir), scenario, env.get("device") or records[0].get("device") or "",
                    env.get("device_name") or records[0].get("device_name") or "", skipped=skipped)
    for record in records:
        point = point_of_record(record)
        check_point(point, f"run {path}")
        snap.points[key_of_record(point)] = point
    return snap


def require_ok_point(snap: Snapshot, what: str) -> None:
    """A side with no point that ran (all oom, skipped, ...) measures nothing: never a pass."""
    if not snap.ok_points:
        raise GateError(f"{what} {snap.source} has no ok point ({len(snap.points)} point(s), none finished): "
                        f"nothing was measured, so it can neither pass the gate nor become a baseline")
