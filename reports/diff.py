"""A run against a baseline run, point by point: status, peak memory and time changes."""

from __future__ import annotations

import pandas as pd

from attnprof.reports.tables import table
from attnprof.reports.units import fmt_bytes, fmt_len, fmt_ms, fmt_pct

# Tensor peaks on CPU are exact (deterministic to the byte), so 1% is already a real
# change; GPU allocator peaks move a little with fragmentation, which 1% also absorbs.
MEMORY_TOLERANCE = 0.01
# Timings are medians of a few repeats; below 10% they are mostly noise (torch.utils.benchmark).
TIME_TOLERANCE = 0.10
KEY = ["series", "panel", "seq_len", "batch"]
ORDER = {"regression": 0, "improvement": 1, "changed": 2, "new": 3, "gone": 4, "same": 5}


def compare(run: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """One row per point of either run: values before and after, and a verdict."""
    cols = KEY + ["status", "peak_bytes", "peak_measured", "time_ms"]
    both = base[cols].merge(run[cols], on=KEY, how="outer", suffixes=("_base", "_run"), indicator=True)
    both["memory_change"] = both["peak_bytes_run"] / both["peak_bytes_base"] - 1.0
    both["time_change"] = both["time_ms_run"] / both["time_ms_base"] - 1.0
    both["verdict"] = [_verdict(r) for _, r in both.iterrows()]
    both["rank"] = both["verdict"].map(ORDER)
    return both.sort_values(["rank"] + KEY, kind="stable").drop(columns=["rank", "_merge"]).reset_index(drop=True)


def _verdict(r) -> str:
    if r["_merge"] == "right_only":
        return "new"
    if r["_merge"] == "left_only":
        return "gone"
    if r["status_base"] != r["status_run"]:
        return "improvement" if r["status_run"] == "ok" else "regression" if r["status_base"] == "ok" else "changed"
    worse = better = False
    for change, tolerance in ((r["memory_change"], MEMORY_TOLERANCE), (r["time_change"], TIME_TOLERANCE)):
        if pd.notna(change):
            worse |= change > tolerance
            better |= change < -tolerance
    return "regression" if worse else "improvement" if better else "same"


def diff_table(diff: pd.DataFrame, show_same: bool = False) -> str:
    """Changed points first, highlighted by verdict; unchanged ones only counted unless asked."""
    shown = diff if show_same else diff[diff["verdict"] != "same"]
    rows = [[r["series"], r["panel"], fmt_len(r["seq_len"]), (r["verdict"], "verdict"),
             f"{_text(r['status_base'])} → {_text(r['status_run'])}",
             f"{fmt_bytes(r['peak_bytes_base'])} → {fmt_bytes(r['peak_bytes_run'])}", fmt_pct(100 * r["memory_change"]),
             f"{fmt_ms(r['time_ms_base'])} → {fmt_ms(r['time_ms_run'])}", fmt_pct(100 * r["time_change"])]
            for _, r in shown.iterrows()]
    same = int((diff["verdict"] == "same").sum())
    note = f"<p>{same} point(s) unchanged within tolerance (memory {MEMORY_TOLERANCE:.0%}, time {TIME_TOLERANCE:.0%}).</p>"
    if not rows:
        return note
    return table(["variant", "mode", "length", "verdict", "status", "peak memory", "Δ memory", "fwd+bwd time",
                  "Δ time"], rows, row_classes=list(shown["verdict"]), cls="diff", text_cols=(1, 3, 4)) + note


def _text(value) -> str:
    return "—" if pd.isna(value) else str(value)
