"""The table printed at the end of a sweep: one row per variant x mode, one column per
length, each cell the point's peak memory and fwd+bwd time, or its status.

Built from plain records (no pandas: printing a table should not cost a second of
imports) and drawn with ``rich``; ``summary_text`` gives the same table as plain text.
"""

from __future__ import annotations

from typing import Iterable

from attnprof.profiler.records import key_of_record, step_time_ms
from attnprof.profiler.units import fmt_bytes, fmt_ms, printable

TITLE = "peak tensor memory and fwd+bwd time per point (status where not ok)"
# A share of the wall time below this (s) gives no ratio: a crashed point or an interrupted
# sweep spends ~0 s inside points, and wall / 0 printed as x39303932010.00.
MIN_RATIO_PART_S = 0.05


def cell(record: dict) -> str:
    """'11.54 MiB 32 ms', or the status ('oom', 'skipped', ...); a missing time is '-'."""
    if record.get("status") != "ok":
        return printable(record.get("status", "?"))
    peak = record.get("measured_peak_bytes") or record.get("predicted_peak_bytes")
    time_ms = step_time_ms(record.get("time_fwd_ms"), record.get("time_bwd_ms"))
    return f"{fmt_bytes(peak)} {fmt_ms(time_ms)}"


def grid(records: Iterable[dict]) -> tuple[list[int], list[tuple[str, str, dict]]]:
    """(lengths ascending, [(variant, mode, {length: cell})] in the sweep's order); the
    last record of a point wins (a resumed run may hold two)."""
    latest: dict = {}
    for record in records:
        latest[key_of_record(record)] = record
    lengths = sorted({r["seq_len"] for r in latest.values()})
    rows: dict[tuple[str, str], dict] = {}
    for record in latest.values():
        rows.setdefault((record["variant"], record["mode"]), {})[record["seq_len"]] = cell(record)
    # labels come from a file (a received run folder): control characters spelled out
    return lengths, [(printable(variant), printable(mode), cells) for (variant, mode), cells in rows.items()]


def rich_table(records: Iterable[dict], stacked: bool = False):
    """The table as a ``rich.table.Table``; None for an empty run. ``stacked`` puts a
    cell's time under its memory, for a terminal too narrow for one line per cell."""
    from rich.table import Table
    from rich.text import Text

    lengths, rows = grid(records)
    if not rows:
        return None
    table = Table(title=TITLE, title_justify="left", header_style="bold", show_lines=stacked)
    table.add_column("variant", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    for n in lengths:
        table.add_column(str(n), justify="right", no_wrap=not stacked)
    previous = None
    for variant, mode, cells in rows:
        values = [cells.get(n, "-") for n in lengths]  # Text, not markup: a label may hold [...]
        styled = [Text(_stack(v) if stacked else v, style="" if v[:1].isdigit() or v == "-" else "yellow")
                  for v in values]
        table.add_row(Text(variant if variant != previous else ""), Text(mode), *styled)
        previous = variant
    return table


def _stack(value: str) -> str:
    """'11.54 MiB 32 ms' -> '11.54 MiB\n32 ms' (the size is a figure and its unit); a status stays as it is."""
    parts = value.split(" ", 2)
    return f"{parts[0]} {parts[1]}\n{parts[2]}" if len(parts) == 3 and value[:1].isdigit() else value


def print_summary(records: Iterable[dict], file=None) -> None:
    """Draw the table on ``file`` (default stdout). Off a terminal it is plain text as
    wide as it needs to be, never wrapped at 80 columns; on a narrow terminal each
    cell's time goes under its memory."""
    import sys

    from rich.console import Console

    records = list(records)
    file = file or sys.stdout
    if not records:
        file.write("(no points)\n")
        return
    terminal = bool(getattr(file, "isatty", lambda: False)())
    needed = _plain_width(records)
    console = Console(file=file, highlight=False, width=None if terminal else needed, soft_wrap=False)
    console.print(rich_table(records, stacked=terminal and needed > console.width))


def _plain_width(records: list[dict]) -> int:
    """Columns the one-line-per-cell table needs: cells, one space of padding each side, borders."""
    lengths, rows = grid(records)
    widths = [max(len("variant"), *(len(v) for v, _, _ in rows)), max(len("mode"), *(len(m) for _, m, _ in rows))]
    widths += [max(len(str(n)), *(len(c.get(n, "-")) for _, _, c in rows)) for n in lengths]
    return max(len(TITLE), sum(widths) + 3 * len(widths) + 1)


def summary_text(records: Iterable[dict]) -> str:
    """The same table as aligned plain text (logs, docs); '(no points)' for an empty run."""
    lengths, rows = grid(records)
    if not rows:
        return "(no points)"
    lines = [["variant", "mode", *map(str, lengths)]]
    lines += [[variant, mode, *(cells.get(n, "-") for n in lengths)] for variant, mode, cells in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in lines]
    return "\n".join([TITLE, *text])


def summary_table(frame) -> str:
    """Compatibility: ``summary_text`` of a DataFrame (``load_run``) or of records."""
    if frame is None:
        return "(no points)"
    records = frame.to_dict("records") if hasattr(frame, "to_dict") else list(frame)
    return summary_text(records)


def ratio(wall_s: float, part_s: float) -> str:
    """' (x3.20)': how much longer the wall time was than ``part_s``; '' when ``part_s`` is
    (near) zero, where the ratio would say nothing but noise over nothing."""
    if not part_s or part_s < MIN_RATIO_PART_S or wall_s <= 0:
        return ""
    return f" (x{wall_s / part_s:.2f})"


def outcome_line(wall_s: float, new: int, kept: int, compute_s: float, timed_s: float, capacity_s: float = 0.0,
                 ahead_s: float = 0.0) -> str:
    """The sweep's last line: wall time, points, and the time inside points and timed passes."""
    return (f"wall {wall_s:.1f} s for {new} new points, {kept} kept from before; "
            f"{compute_s:.1f} s inside the points' processes{ratio(wall_s, compute_s)}, "
            f"{timed_s:.1f} s of timed forward/backward passes{ratio(wall_s, timed_s)}"
            + (f"; predictions ahead {ahead_s:.1f} s" if ahead_s else "")
            + (f"; capacity predictions {capacity_s:.1f} s" if capacity_s else ""))


PHASES = ("start", "predict", "cuda_context", "memory_pass", "timing_pass")  # worker.measure_point's order


def phases_line(records: Iterable[dict]) -> str:
    """Where a measured point's seconds went (``point_phases_s``), the median of each phase over
    the ok points, with their median wall time; '' when no ok point has phases."""
    import statistics

    rows = [r for r in records if r.get("status") == "ok" and isinstance(r.get("point_phases_s"), dict)
            and r["point_phases_s"]]
    if not rows:
        return ""
    names = [p for p in PHASES if any(p in r["point_phases_s"] for r in rows)]
    cells = []
    for name in names:
        values = [r["point_phases_s"][name] for r in rows if isinstance(r["point_phases_s"].get(name), (int, float))]
        if values:
            cells.append(f"{name.replace('_', ' ')} {statistics.median(values):.2f} s")
    walls = [r["point_wall_s"] for r in rows if isinstance(r.get("point_wall_s"), (int, float))]
    tail = f" (point wall {statistics.median(walls):.2f} s)" if walls else ""
    return f"per point, median of {len(rows)} ok: " + ", ".join(cells) + tail
