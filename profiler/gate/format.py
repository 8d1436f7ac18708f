"""The gate's result for people and for tools: a terminal table, Markdown, JSON.

Plain ASCII in the terminal (CI logs mangle anything else); Markdown for the GitHub step
summary and pull-request comments; JSON with every comparison and exact byte counts.
Variant labels such as ``lsh[n_hashes=8]`` appear verbatim in all three.
"""

from __future__ import annotations

from dataclasses import asdict

from attnprof.profiler.gate.compare import GateResult

RESULT_FORMAT = "attnprof-gate-result"
FIGURE_NAMES = {"predicted_peak_bytes": "predicted", "measured_peak_bytes": "measured",
                "status": "status", "time_ms": "time"}
HEADER = ("point", "figure", "baseline", "current", "change", "verdict")


def format_bytes(n) -> str:
    """Binary units, two decimals: 1.00 MiB is 1048576 bytes."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _value(figure: str, value) -> str:
    if value is None:
        return "-"
    if figure == "time_ms":
        return f"{value:.2f} ms"
    return value if figure == "status" else format_bytes(value)


def _figure(c) -> str:
    return f"measured/{c.method}" if c.method else FIGURE_NAMES.get(c.figure, c.figure)


def _cells(c) -> tuple:
    change = "" if c.change_pct is None else f"{c.change_pct:+.1f}%"
    verdict = "REGRESSION" if c.verdict == "regression" else c.verdict
    return (c.label, _figure(c), _value(c.figure, c.baseline), _value(c.figure, c.current), change, verdict)


def _tolerance(result: GateResult) -> str:
    return (f"{result.tolerance_pct:g}% or {format_bytes(result.abs_tolerance_bytes)}, whichever is larger")


def summary_line(result: GateResult) -> str:
    """PASS/FAIL, counts and the tolerance, in one line."""
    if result.regressions:
        points = len({c.label for c in result.regressions})
        head = f"FAIL: {len(result.regressions)} regression(s) in {points} of {result.points_compared} points"
    else:
        head = f"PASS: {result.points_compared} points within tolerance"
    return f"{head} (scenario {result.scenario!r}, {result.device} {result.device_name}; tolerance {_tolerance(result)})"


def _detail(c) -> str:
    """A regression or improvement spelled out: both figures, exact bytes, % change."""
    if c.figure == "status":
        return f"{c.label}: status {c.baseline} -> {c.current}" + (f" ({c.note})" if c.note else "")
    if c.baseline is None or c.current is None:
        return f"{c.label}: {_figure(c)} {_value(c.figure, c.baseline)} -> {_value(c.figure, c.current)} ({c.note})"
    change = "" if c.change_pct is None else f"{c.change_pct:+.1f}%, "
    return (f"{c.label}: {_figure(c)} {format_bytes(c.baseline)} -> {format_bytes(c.current)} "
            f"({change}{c.baseline} -> {c.current} bytes; allowed margin {format_bytes(round(c.margin_bytes))})")


def _update_hint(result: GateResult) -> str:
    return f"attnprof gate --update --baseline {result.baseline_path} {result.run_dir}"


def _notes(result: GateResult) -> list:
    """Lines after the table: regressions, improvements, points allowed missing."""
    lines = [summary_line(result)]
    if result.regressions:
        lines += ["regressed:"] + [f"  {_detail(c)}" for c in result.regressions]
    if result.improvements:
        lines += [f"improved beyond tolerance ({len(result.improvements)}); if intended, record them with: "
                  f"{_update_hint(result)}"] + [f"  {_detail(c)}" for c in result.improvements]
    if result.missing:
        lines.append(f"allowed by --allow-missing: {len(result.missing)} baseline point(s) not in this run: "
                     + ", ".join(result.missing))
    if result.new:
        lines.append(f"allowed by --allow-missing: {len(result.new)} new point(s) not gated: " + ", ".join(result.new))
    return lines


def format_table(result: GateResult) -> str:
    """Aligned plain-text columns, then the summary and the details that matter."""
    rows = [HEADER] + [_cells(c) for c in result.comparisons]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    right = {2, 3, 4}  # numbers align right
    lines = ["  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    return "\n".join(lines + [""] + _notes(result)) + "\n"


def _md_table(comparisons) -> list:
    def cell(v):
        return str(v).replace("|", "\\|")
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * 2 + "---:|" * 3 + "---|"]
    for c in comparisons:
        cells = list(_cells(c))
        cells[0] = f"`{cells[0]}`"
        if c.verdict == "regression":
            cells[5] = "**REGRESSION**"
        out.append("| " + " | ".join(cell(v) for v in cells) + " |")
    return out


def format_markdown(result: GateResult) -> str:
    """A step-summary section: verdict first, regressions and improvements, all rows folded."""
    lines = [f"### attnprof memory gate: {summary_line(result)}", "",
             f"Baseline `{result.baseline_path}`, run `{result.run_dir}`.", ""]
    if result.regressions:
        lines += ["**Regressions**", ""] + [f"- `{_detail(c)}`" for c in result.regressions] + [""]
    if result.improvements:
        lines += [f"**Improved beyond tolerance**: if intended, record them with `{_update_hint(result)}`", ""]
        lines += [f"- `{_detail(c)}`" for c in result.improvements] + [""]
    for what, labels in (("baseline points not in this run", result.missing), ("new points, not gated", result.new)):
        if labels:
            lines += [f"Allowed by `--allow-missing`, {len(labels)} {what}: "
                      + ", ".join(f"`{label}`" for label in labels), ""]
    lines += [f"<details><summary>All {len(result.comparisons)} comparisons</summary>", ""]
    lines += _md_table(result.comparisons) + ["", "</details>", ""]
    return "\n".join(lines)


def format_error_markdown(message: str) -> str:
    return f"### attnprof memory gate: ERROR\n\n`error: {message}`\n\n"


def result_to_json(result: GateResult) -> dict:
    """Every comparison with exact figures; the verdict and exit code on top."""
    return {"format": RESULT_FORMAT, "version": 1, "exit_code": result.exit_code,
            "verdict": "fail" if result.regressions else "pass",
            "baseline": result.baseline_path, "run_dir": result.run_dir, "scenario": result.scenario,
            "device": result.device, "device_name": result.device_name,
            "tolerance_pct": result.tolerance_pct, "abs_tolerance_bytes": result.abs_tolerance_bytes,
            "points_compared": result.points_compared,
            "regressions": len(result.regressions), "improvements": len(result.improvements),
            "missing_points": result.missing, "new_points": result.new,
            "comparisons": [asdict(c) for c in result.comparisons]}


def error_to_json(message: str) -> dict:
    return {"format": RESULT_FORMAT, "version": 1, "exit_code": 2, "verdict": "error", "error": message}
