"""What holds each series' peak (issue 24): at the series' longest ok point with a
prediction, the predicted peak split into model states, inputs, activations, the LM head
and loss, and temporaries (profiler/predict/peak_split.py groups the tracker's
categories), and the op whose output reached the peak, with its pass.

Why: "does my step fit" is half the answer; the other half is what to change when it does
not. Model states call for sharding or a smaller optimizer, activations for checkpointing
or reversible blocks, the LM head/loss for --loss-chunks, temporaries for a fused kernel.
The figures are the fake-tensor prediction's (exact tensor accounting, equal to the CPU
tracker to the byte): a record from before the split (no breakdown) is left out.
"""

from __future__ import annotations

import pandas as pd

from attnprof.profiler.predict.peak_split import OTHER, PARTS, peak_op_text, split
from attnprof.profiler.units import fmt_bytes, fmt_len
from attnprof.reports.data import panels, series_order
from attnprof.reports.tables import table

NOTE = ("Predicted peak at each series' longest ok point, split by what holds it: model states (parameters, "
        "gradients, optimizer states, autocast copies of the parameters), inputs, activations (saved for "
        "backward), the LM head and loss (logits, log-softmax, loss and their gradients, the chunked recompute "
        "of --loss-chunks included), temporaries (the optimizer step's included). Peak op: the op whose output "
        "reached the peak, and its pass (fwd, bwd, step); '-' where a registered tensor did or the record "
        "predates it.")


def _breakdown(value) -> dict:
    """A record's predicted breakdown, {} where it has none (NaN, an older record)."""
    return value if isinstance(value, dict) else {}


def split_rows(frame: pd.DataFrame) -> list[dict]:
    """Per series and mode (panel): its longest ok point with a breakdown, as
    {series, panel, seq_len, peak_bytes, parts: part -> bytes, peak_op}; none for a series
    without one."""
    if "predicted_breakdown_bytes" not in frame:
        return []
    out = []
    for panel in panels(frame):
        for s in series_order(frame):
            mine = frame[(frame["series"] == s) & (frame["panel"] == panel) & (frame["status"] == "ok")]
            mine = mine[[bool(_breakdown(b)) for b in mine["predicted_breakdown_bytes"]]]
            if not len(mine):
                continue
            r = mine.loc[mine["seq_len"].idxmax()]
            out.append({"series": s, "panel": panel, "seq_len": int(r["seq_len"]),
                        "peak_bytes": r["predicted_peak_bytes"], "parts": split(_breakdown(r["predicted_breakdown_bytes"])),
                        "peak_op": peak_op_text(r.get("predicted_peak_op"), r.get("predicted_peak_pass"))})
    return out


def peak_split_table(frame: pd.DataFrame) -> str:
    """The HTML table of ``split_rows`` (escaped by ``tables.cell``), "" when no row has one."""
    rows = split_rows(frame)
    if not rows:
        return ""
    parts = [part for part, _ in PARTS] + ([OTHER] if any(OTHER in r["parts"] for r in rows) else [])
    body = [[r["series"], r["panel"], fmt_len(r["seq_len"]), fmt_bytes(r["peak_bytes"]),
             *(fmt_bytes(r["parts"].get(part, 0)) for part in parts), r["peak_op"]] for r in rows]
    return table(["variant", "mode", "length", "predicted peak", *parts, "peak op"], body, cls="peak-split",
                 text_cols=(1, len(parts) + 4))
