"""The table printed at the end of a sweep: one row per variant x mode, one column per length."""

from __future__ import annotations

from attnprof.profiler.units import fmt_bytes


def _cell(row) -> str:
    if row["status"] != "ok":
        return row["status"]
    peak = row.get("measured_peak_bytes") or row.get("predicted_peak_bytes")
    time_ms = (row.get("time_fwd_ms") or 0) + (row.get("time_bwd_ms") or 0)
    return f"{fmt_bytes(peak)} {time_ms:.0f}ms"


def summary_table(frame) -> str:
    """Peak memory and fwd+bwd time per point, or its status; '' for an empty run."""
    if frame is None or frame.empty:
        return "(no points)"
    frame = frame.assign(cell=frame.apply(_cell, axis=1))
    table = frame.pivot_table(index=["variant", "mode"], columns="seq_len", values="cell", aggfunc="last", sort=False)
    table = table.fillna("-")
    return "peak tensor memory and fwd+bwd time per point (status where not ok)\n" + table.to_string()
