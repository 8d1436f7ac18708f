"""A run against a baseline run, point by point: status, peak memory and time changes.

The verdicts come from the gate's judge (``profiler.gate.verdict``) with the gate's
default tolerance, so the report never calls a regression that ``attnprof gate`` would
pass. Time is never a regression: beyond ``TIME_CHANGE_PCT`` a point is only "slower"
or "faster" (and only when its memory and status did not change).
"""

from __future__ import annotations

import pandas as pd

from attnprof.profiler.gate.verdict import TIME_CHANGE_PCT, Tolerance, memory_verdict, status_verdict, time_verdict
from attnprof.profiler.units import fmt_bytes, fmt_len, fmt_ms, fmt_pct, missing
from attnprof.reports.tables import table

KEY = ["series", "panel", "seq_len", "batch"]
# improvement: memory or status got better beyond tolerance (the gate's "improved").
ORDER = {"regression": 0, "improvement": 1, "changed": 2, "new": 3, "gone": 4, "slower": 5, "faster": 6, "same": 7}
_REPORT_WORD = {"ok": "same", "regression": "regression", "improved": "improvement", "changed": "changed"}


def compare(run: pd.DataFrame, base: pd.DataFrame, tolerance: Tolerance | None = None) -> pd.DataFrame:
    """One row per point of either run: values before and after, and a verdict."""
    tolerance = tolerance or Tolerance()
    cols = KEY + ["status", "peak_bytes", "peak_measured", "time_ms"]
    both = base[cols].merge(run[cols], on=KEY, how="outer", suffixes=("_base", "_run"), indicator=True)
    both["memory_change"] = both["peak_bytes_run"] / both["peak_bytes_base"] - 1.0
    both["time_change"] = both["time_ms_run"] / both["time_ms_base"] - 1.0
    both["verdict"] = [_verdict(r, tolerance) for _, r in both.iterrows()]
    both["rank"] = both["verdict"].map(ORDER)
    return both.sort_values(["rank"] + KEY, kind="stable").drop(columns=["rank", "_merge"]).reset_index(drop=True)


def _number(value):
    return None if missing(value) else float(value)


def _verdict(r, tolerance: Tolerance) -> str:
    if r["_merge"] == "right_only":
        return "new"
    if r["_merge"] == "left_only":
        return "gone"
    verdict = status_verdict(r["status_base"], r["status_run"])
    old, new = _number(r["peak_bytes_base"]), _number(r["peak_bytes_run"])
    if verdict == "ok" and old is not None and new is not None:
        verdict = memory_verdict(old, new, tolerance)
    if verdict != "ok":
        return _REPORT_WORD[verdict]
    return time_verdict(_number(r["time_ms_base"]), _number(r["time_ms_run"])) or "same"


def diff_table(diff: pd.DataFrame, show_same: bool = False, tolerance: Tolerance | None = None) -> str:
    """Changed points first, highlighted by verdict; unchanged ones only counted unless asked."""
    tolerance = tolerance or Tolerance()
    shown = diff if show_same else diff[diff["verdict"] != "same"]
    rows = [[r["series"], r["panel"], fmt_len(r["seq_len"]), (r["verdict"], "verdict"),
             f"{_text(r['status_base'])} → {_text(r['status_run'])}",
             f"{fmt_bytes(r['peak_bytes_base'])} → {fmt_bytes(r['peak_bytes_run'])}", fmt_pct(100 * r["memory_change"]),
             f"{fmt_ms(r['time_ms_base'])} → {fmt_ms(r['time_ms_run'])}", fmt_pct(100 * r["time_change"])]
            for _, r in shown.iterrows()]
    same = int((diff["verdict"] == "same").sum())
    note = (f"<p>{same} point(s) unchanged. Regression and improvement: status, or peak memory beyond "
            f"{tolerance.describe()} (the tolerance of attnprof gate). Time never regresses: beyond "
            f"{TIME_CHANGE_PCT:g}% a point is only slower or faster.</p>")
    if not rows:
        return note
    return table(["variant", "mode", "length", "verdict", "status", "peak memory", "Δ memory", "fwd+bwd time",
                  "Δ time"], rows, row_classes=list(shown["verdict"]), cls="diff", text_cols=(1, 3, 4)) + note


def _text(value) -> str:
    return "-" if missing(value) else str(value)
