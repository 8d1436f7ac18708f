"""The gate's verdict: a run against a baseline, figure by figure, point by point.

Only deterministic memory figures gate: the predicted peak (fake tensors, identical on
every machine), the exact CPU tensor peak (tensor tracker), and the CUDA allocator peak
when both sides ran on the same GPU model. RSS and NVML are noisy and never gate; time
is reported next to memory but never gates either (CI runners are shared and jittery).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from attnprof.profiler.gate.baseline import read_baseline
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.snapshot import Snapshot, point_label, read_run, require_ok_point
from attnprof.profiler.gate.verdict import (DEFAULT_ABS_TOLERANCE, DEFAULT_TOLERANCE_PCT, Tolerance, change_pct,
                                            memory_verdict, status_verdict)
from attnprof.profiler.records import DTYPE_ALIASES, IDENTITY_FIELDS, key_of_record

EXACT_METHODS = ("tensor-tracker", "cuda-allocator")  # measured_by values that may gate
# Scenario fields that change what a point's figures mean. Not compared: lengths, variants
# and modes (they decide which points exist: see missing points), timing settings, paths.
SCENARIO_FIELDS = ("name", "scope", "batch", "tokens_per_batch", "d_model", "heads", "layers",
                   "dtype", "ff_chunks", "forward_only")
# --- issue 24 (absent from older manifests: not compared) ---
SCENARIO_FIELDS += ("mlp", "ffn_dim", "norm", "precision", "optimizer", "optimizer_impl")
# ok: within tolerance. regression: fails the gate. improved: better beyond tolerance.
# new: a figure the baseline lacks. changed: a non-ok status became another. info: not gated.
VERDICTS = ("ok", "regression", "improved", "new", "changed", "info")


@dataclass
class Comparison:
    """One figure of one point, baseline against current, and what the gate makes of it."""

    point: dict  # identity fields, verbatim from the baseline
    label: str  # point_label(point)
    figure: str  # "predicted_peak_bytes" | "measured_peak_bytes" | "status" | "time_ms"
    baseline: Any
    current: Any
    verdict: str  # one of VERDICTS
    change_pct: Optional[float] = None  # (current - baseline) / baseline * 100
    margin_bytes: Optional[int] = None  # whole bytes of growth allowed: max(baseline * tol, abs_tol), floored
    method: str = ""  # measured_by, for measured figures
    note: str = ""


@dataclass
class GateResult:
    """Every comparison of one gate run, and the settings it ran with."""

    baseline_path: str
    run_dir: str
    scenario: str
    device: str
    device_name: str
    tolerance_pct: float
    abs_tolerance_bytes: int
    points_compared: int  # points both sides have with at least one gated figure
    comparisons: list = field(default_factory=list)
    missing: list = field(default_factory=list)  # labels in the baseline only (--allow-missing)
    new: list = field(default_factory=list)  # labels in the run only (--allow-missing)
    skipped: list = field(default_factory=list)  # invalid records left out, "FILE line N: why" (--skip-invalid)

    @property
    def regressions(self) -> list:
        return [c for c in self.comparisons if c.verdict == "regression"]

    @property
    def improvements(self) -> list:
        """Changes for the better that an --update would lock in."""
        return [c for c in self.comparisons if c.verdict in ("improved", "new")]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


    @property
    def tolerance(self) -> Tolerance:
        return Tolerance(self.tolerance_pct, self.abs_tolerance_bytes)


def _normal(field_name: str, value):
    return DTYPE_ALIASES.get(value, value) if field_name == "dtype" and isinstance(value, str) else value


def check_comparable(base: Snapshot, run: Snapshot) -> None:
    """Same scenario and shape; GPU figures only on the same device model. Else exit 2."""
    for name in SCENARIO_FIELDS:
        if name in base.scenario and name in run.scenario:
            old, new = _normal(name, base.scenario[name]), _normal(name, run.scenario[name])
            if old != new:
                raise GateError(f"scenario differs: {name} is {old!r} in baseline {base.source} but {new!r} in run "
                                f"{run.source} (refresh the baseline with --update if that is intended)")
    if "cuda" in (base.device, run.device):
        same = base.device == run.device and base.device_name == run.device_name and base.device_name
        if not same:
            raise GateError(f"device differs: baseline {base.source} was measured on {base.device} "
                            f"({base.device_name or 'unknown model'}), run {run.source} on {run.device} "
                            f"({run.device_name or 'unknown model'}); GPU allocator figures compare only on the "
                            f"same device model: gate against a baseline made on this device")


def _bytes_row(point, label, figure, old, new, new_status, tolerance: Tolerance, method=""):
    """Compare one byte figure; None when neither side has it (or a failed status explains it)."""
    row = Comparison(point, label, figure, old, new, "ok", method=method)
    if old is None and new is None:
        return None
    if old is None:
        row.verdict, row.note = "new", "not in the baseline"
    elif new is None:
        if new_status != "ok":
            return None  # the status row reports the failure
        row.verdict, row.note = "regression", "figure missing now"
    else:
        row.margin_bytes = tolerance.margin(old)
        row.change_pct = change_pct(old, new)
        row.verdict = memory_verdict(old, new, tolerance)
    return row


def compare_point(old: dict, new: dict, tolerance: Tolerance) -> list:
    """Status, predicted peak, measured peak (exact methods only) and time of one point."""
    point = {f: old[f] for f in IDENTITY_FIELDS}
    label = point_label(point)
    rows = []
    if old["status"] != "ok" or new["status"] != "ok":
        rows.append(Comparison(point, label, "status", old["status"], new["status"],
                               status_verdict(old["status"], new["status"]),
                               note=new.get("reason", "") if new["status"] != "ok" else ""))
    rows.append(_bytes_row(point, label, "predicted_peak_bytes", old["predicted_peak_bytes"],
                           new["predicted_peak_bytes"], new["status"], tolerance))
    by_old, by_new = old["measured_by"], new["measured_by"]
    if by_old and by_new and by_old != by_new:
        raise GateError(f"point {label}: measured by {by_old} in the baseline but by {by_new} now; "
                        f"these figures are not comparable")
    method = by_old or by_new
    if method in EXACT_METHODS:
        rows.append(_bytes_row(point, label, "measured_peak_bytes", old["measured_peak_bytes"],
                               new["measured_peak_bytes"], new["status"], tolerance, method))
    if old["time_ms"] is not None or new["time_ms"] is not None:
        rows.append(Comparison(point, label, "time_ms", old["time_ms"], new["time_ms"], "info",
                               change_pct(old["time_ms"], new["time_ms"]), note="reported, never gated"))
    return [r for r in rows if r is not None]


def _missing_message(missing: list, new: list, run: str) -> str:
    def some(labels):
        return ", ".join(labels[:3]) + (f", ... ({len(labels) - 3} more)" if len(labels) > 3 else "")
    parts = []
    if missing:
        parts.append(f"{len(missing)} baseline point(s) missing from run {run}: {some(missing)}")
    if new:
        parts.append(f"{len(new)} run point(s) not in the baseline: {some(new)}")
    return "; ".join(parts) + " (pass --allow-missing to gate the common points, or --update to refresh the baseline)"


def compare(baseline: str | Path | Snapshot, run_dir: str | Path, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
            abs_tolerance_bytes: int = DEFAULT_ABS_TOLERANCE, allow_missing: bool = False,
            skip_invalid: bool = False) -> GateResult:
    """Compare a run folder with a baseline. Raises GateError when they are not comparable.

    A figure regresses when current > baseline + max(baseline * tolerance_pct / 100,
    abs_tolerance_bytes); it improves when current < baseline - the same margin
    (``verdict.memory_verdict``). Never a pass on nothing, whatever ``allow_missing``: a
    baseline without an ok point, or no point with a gated figure on both sides, is a
    GateError; so is a run without an ok point, unless it already fails (points that were
    ok in the baseline and failed now are regressions, each named). An invalid record on
    either side is a GateError naming file and line, unless ``skip_invalid``: then it is
    left out and ``GateResult.skipped`` lists it (every summary says how many).
    """
    tolerance = Tolerance(tolerance_pct, abs_tolerance_bytes)  # refuses nan, inf and negatives
    base = baseline if isinstance(baseline, Snapshot) else read_baseline(baseline, skip_invalid)
    run = read_run(run_dir, skip_invalid)
    check_comparable(base, run)
    require_ok_point(base, "baseline")
    missing = [point_label(p) for k, p in base.points.items() if k not in run.points]
    new = [point_label(p) for k, p in run.points.items() if k not in base.points]
    if (missing or new) and not allow_missing:
        raise GateError(_missing_message(missing, new, run.source))
    common = [k for k in base.points if k in run.points]
    rows = [row for k in common for row in compare_point(base.points[k], run.points[k], tolerance)]
    if not any(row.verdict == "regression" for row in rows):
        require_ok_point(run, "run")  # nothing ran and nothing regressed: cannot pass either
    gated = {key_of_record(row.point) for row in rows if row.verdict != "info"}
    if not gated:
        raise GateError(f"nothing to compare: baseline {base.source} and run {run.source} share "
                        f"{len(common)} point(s) and no gated memory figure; the gate never passes on "
                        f"zero points compared")
    return GateResult(base.source, run.source, str(base.scenario.get("name")), run.device, run.device_name,
                      tolerance.pct, tolerance.abs_bytes, len(gated), rows, missing, new, base.skipped + run.skipped)
