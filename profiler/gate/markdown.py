"""The gate's result as Markdown, for the GitHub step summary and pull-request comments.

Every string that came from a file (variant labels, statuses, reasons, scenario and
device names, paths, error messages) goes into a code span built by ``code``: on one
line, fenced by more backticks than it contains, so nothing in it can close the span,
start raw HTML or a link, or break a table row (``cell`` also escapes ``|``). Text
outside code spans is attnprof's own.
"""

from __future__ import annotations

import re

from attnprof.profiler.gate.compare import GateResult
from attnprof.profiler.gate.format import HEADER, cells, detail, headline, skipped_text, update_hint
from attnprof.profiler.units import printable

_TICKS = re.compile(r"`+")


def code(text) -> str:
    """A code span that shows ``text`` verbatim (on one line), whatever it contains."""
    text = printable(text)
    fence = "`" * (max((len(run) for run in _TICKS.findall(text)), default=0) + 1)
    if not text.strip(" "):  # all spaces (or empty) show as they are; a span needs one character
        return f"{fence}{text or ' '}{fence}"
    pad = " " if text[0] in "` " or text[-1] in "` " else ""  # CommonMark strips one space each side
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text) -> str:
    """A table cell: a code span whose pipes cannot end the cell."""
    return code(text).replace("|", "\\|")


def _table(comparisons) -> list:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * 2 + "---:|" * 3 + "---|"]
    for c in comparisons:
        label, figure, old, new, change, verdict = cells(c)
        verdict = "**REGRESSION**" if c.verdict == "regression" else verdict
        out.append("| " + " | ".join([cell(label), figure, cell(old), cell(new), change, verdict]) + " |")
    return out


def _summary(result: GateResult) -> str:
    return (f"{headline(result)}; scenario {code(result.scenario)}, device {code(result.device)} "
            f"{code(result.device_name or '?')}; tolerance {result.tolerance.describe()}"
            f"{skipped_text(result).replace('--skip-invalid', '`--skip-invalid`')}.")


def format_markdown(result: GateResult) -> str:
    """A step-summary section: verdict first, regressions and improvements, all rows folded."""
    lines = [f"### attnprof memory gate: {'FAIL' if result.regressions else 'PASS'}", "", _summary(result), "",
             f"Baseline {code(result.baseline_path)}, run {code(result.run_dir)}.", ""]
    if result.regressions:
        lines += ["**Regressions**", ""] + [f"- {code(detail(c))}" for c in result.regressions] + [""]
    if result.improvements:
        lines += [f"**Improved beyond tolerance**: if intended, record them with {code(update_hint(result))}", ""]
        lines += [f"- {code(detail(c))}" for c in result.improvements] + [""]
    for what, labels in (("baseline points not in this run", result.missing), ("new points, not gated", result.new)):
        if labels:
            lines += [f"Allowed by `--allow-missing`, {len(labels)} {what}: " + ", ".join(map(code, labels)), ""]
    if result.skipped:
        lines += [f"Skipped by `--skip-invalid`, {len(result.skipped)} invalid record(s), not gated: "
                  + ", ".join(map(code, result.skipped)), ""]
    lines += [f"<details><summary>All {len(result.comparisons)} comparisons</summary>", ""]
    lines += _table(result.comparisons) + ["", "</details>", ""]
    return "\n".join(lines)


def format_error_markdown(message: str) -> str:
    return f"### attnprof memory gate: ERROR\n\n{code('error: ' + str(message))}\n\n"
