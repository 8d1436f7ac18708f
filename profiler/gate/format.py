"""The gate's result for people and for tools: a terminal table and JSON (Markdown: see
``gate.markdown``).

Plain ASCII in the terminal (CI logs mangle anything else), every user string on one
line (``baseline.printable``); JSON with every comparison and exact byte counts. Variant
labels such as ``lsh[n_hashes=8]`` appear verbatim.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict

from attnprof.profiler.gate.compare import GateResult
from attnprof.profiler.units import printable
from attnprof.profiler.units import fmt_bytes, fmt_ms, fmt_pct

RESULT_FORMAT = "attnprof-gate-result"
FIGURE_NAMES = {"predicted_peak_bytes": "predicted", "measured_peak_bytes": "measured",
                "status": "status", "time_ms": "time"}
HEADER = ("point", "figure", "baseline", "current", "change", "verdict")


def value_text(figure: str, value) -> str:
    if value is None:
        return "-"
    if figure == "time_ms":
        return fmt_ms(value)
    return printable(value) if figure == "status" else fmt_bytes(value)


def figure_text(c) -> str:
    return f"measured/{c.method}" if c.method else FIGURE_NAMES.get(c.figure, c.figure)


def cells(c) -> tuple:
    verdict = "REGRESSION" if c.verdict == "regression" else c.verdict
    return (c.label, figure_text(c), value_text(c.figure, c.baseline), value_text(c.figure, c.current),
            fmt_pct(c.change_pct, blank=""), verdict)


def headline(result: GateResult) -> str:
    """PASS or FAIL and how many points were compared (every summary says it)."""
    n = result.points_compared
    if result.regressions:
        points = len({c.label for c in result.regressions})
        return f"FAIL: {len(result.regressions)} regression(s) in {points} of {n} points compared"
    return f"PASS: {n} point(s) compared, all within tolerance"


def skipped_text(result: GateResult) -> str:
    """'; 2 invalid record(s) skipped (--skip-invalid)', or '' when none was."""
    return f"; {len(result.skipped)} invalid record(s) skipped (--skip-invalid)" if result.skipped else ""


def summary_line(result: GateResult) -> str:
    """The headline, scenario, device and the tolerance, in one line."""
    return printable(f"{headline(result)} (scenario {result.scenario!r}, {result.device} {result.device_name}; "
                     f"tolerance {result.tolerance.describe()}{skipped_text(result)})")


def detail(c) -> str:
    """A regression or improvement spelled out: both figures, exact bytes, % change."""
    if c.figure == "status":
        note = f" ({printable(c.note)})" if c.note else ""
        return f"{c.label}: status {value_text('status', c.baseline)} -> {value_text('status', c.current)}{note}"
    if c.baseline is None or c.current is None:
        return (f"{c.label}: {figure_text(c)} {value_text(c.figure, c.baseline)} -> "
                f"{value_text(c.figure, c.current)} ({c.note})")
    change = "" if c.change_pct is None else f"{fmt_pct(c.change_pct)}, "
    return (f"{c.label}: {figure_text(c)} {fmt_bytes(c.baseline)} -> {fmt_bytes(c.current)} "
            f"({change}{c.baseline} -> {c.current} bytes; allowed margin {fmt_bytes(c.margin_bytes)})")


def update_hint(result: GateResult) -> str:
    """The command that records this run as the new baseline (paths quoted for a shell)."""
    return (f"attnprof gate --update --baseline {shlex.quote(printable(result.baseline_path))} "
            f"{shlex.quote(printable(result.run_dir))}")


def _notes(result: GateResult) -> list:
    """Lines after the table: regressions, improvements, points allowed missing."""
    lines = [summary_line(result)]
    if result.regressions:
        lines += ["regressed:"] + [f"  {detail(c)}" for c in result.regressions]
    if result.improvements:
        lines += [f"improved beyond tolerance ({len(result.improvements)}); if intended, record them with: "
                  f"{update_hint(result)}"] + [f"  {detail(c)}" for c in result.improvements]
    if result.missing:
        lines.append(f"allowed by --allow-missing: {len(result.missing)} baseline point(s) not in this run: "
                     + ", ".join(result.missing))
    if result.new:
        lines.append(f"allowed by --allow-missing: {len(result.new)} new point(s) not gated: " + ", ".join(result.new))
    if result.skipped:
        lines.append(f"skipped by --skip-invalid: {len(result.skipped)} invalid record(s), not gated:")
        lines += [f"  {printable(s)}" for s in result.skipped]
    return lines


def format_table(result: GateResult) -> str:
    """Aligned plain-text columns, then the summary and the details that matter."""
    rows = [HEADER] + [cells(c) for c in result.comparisons]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    right = {2, 3, 4}  # numbers align right
    lines = ["  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    return "\n".join(lines + [""] + _notes(result)) + "\n"


def result_to_json(result: GateResult) -> dict:
    """Every comparison with exact figures; the verdict and exit code on top."""
    return {"format": RESULT_FORMAT, "version": 1, "exit_code": result.exit_code,
            "verdict": "fail" if result.regressions else "pass",
            "baseline": result.baseline_path, "run_dir": result.run_dir, "scenario": result.scenario,
            "device": result.device, "device_name": result.device_name,
            "tolerance_pct": result.tolerance_pct, "abs_tolerance_bytes": result.abs_tolerance_bytes,
            "points_compared": result.points_compared,
            "regressions": len(result.regressions), "improvements": len(result.improvements),
            "missing_points": result.missing, "new_points": result.new, "skipped_invalid": result.skipped,
            "comparisons": [asdict(c) for c in result.comparisons]}


def error_to_json(message: str) -> dict:
    return {"format": RESULT_FORMAT, "version": 1, "exit_code": 2, "verdict": "error", "error": message}
