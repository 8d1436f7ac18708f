"""HTML tables of a run. Every value is escaped here, once, by ``cell``; callers pass
plain text and a CSS class, never markup."""

from __future__ import annotations

from html import escape

import pandas as pd

from attnprof.reports.capacity import Capacity, fit_text
from attnprof.reports.data import panels, series_order
from attnprof.reports.scaling import Slope
from attnprof.profiler.units import fmt_bytes, fmt_len, fmt_ms, missing


def cell(value, cls: str = "", tag: str = "td", title: str = "") -> str:
    attrs = (f' class="{escape(cls)}"' if cls else "") + (f' title="{escape(title)}"' if title else "")
    return f"<{tag}{attrs}>{escape('' if missing(value) else str(value))}</{tag}>"


def table(headers: list[str], rows: list[list], row_classes: list[str] | None = None, cls: str = "",
          text_cols: tuple = ()) -> str:
    """rows hold plain values or (value, css class) pairs; the first column is a row header;
    it and the columns in ``text_cols`` align left (numbers align right)."""
    text_cols = (0, *text_cols)
    head = "".join(cell(h, "text" if j in text_cols else "", tag="th") for j, h in enumerate(headers))
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, c in enumerate(row):
            value, css = c if isinstance(c, tuple) else (c, "")
            css = " ".join(filter(None, (css, "text" if j in text_cols else "")))
            cells.append(cell(value, css, tag="th" if j == 0 else "td"))
        rc = row_classes[i] if row_classes else ""
        body.append(f'<tr{f" class={chr(34)}{escape(rc)}{chr(34)}" if rc else ""}>{"".join(cells)}</tr>')
    return (f'<table class="{escape(cls)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def pivot(frame: pd.DataFrame, panel: str, what: str) -> str:
    """Series × length for one panel: peak memory (``what='memory'``) or time (``'time'``)."""
    rows_of = frame[frame["panel"] == panel]
    lengths = sorted(rows_of["seq_len"].unique())
    rows = []
    for s in series_order(rows_of):
        row = [s]
        for n in lengths:
            hit = rows_of[(rows_of["series"] == s) & (rows_of["seq_len"] == n)]
            row.append(_pivot_cell(hit.iloc[0], what) if len(hit) else ("", "na"))
        rows.append(row)
    return table(["variant"] + [fmt_len(n) for n in lengths], rows, cls="pivot")


def _pivot_cell(r, what: str) -> tuple:
    if what == "memory":
        if r["status"] != "ok":
            return (f"{r['status']} (pred. {fmt_bytes(r['predicted_peak_bytes'])})", f"status-{r['status']}")
        return (fmt_bytes(r["peak_bytes"]), "" if r["peak_measured"] else "pred")
    if r["status"] != "ok":
        return (str(r["status"]), f"status-{r['status']}")
    return (fmt_ms(r["time_ms"]), "")


def slope_table(slopes: list[Slope]) -> str:
    def num(x):
        return "" if x is None else f"{x:.2f}"

    rows = []
    for s in slopes:
        exp = s.expected
        off = exp is not None and s.memory is not None and s.panel == "attention" and abs(s.memory - exp[0]) > 0.25
        rows.append([s.series, s.panel, (num(s.memory), "off" if off else ("" if s.memory_measured else "pred")),
                     "?" if exp is None else num(exp[0]), num(s.time), "?" if exp is None else num(exp[1]), s.points])
    return table(["variant", "mode", "memory slope (fitted)", "memory exponent (expected)",
                  "time slope (fitted)", "time exponent (expected)", "ok lengths"], rows, cls="slopes", text_cols=(1,))


def points_table(frame: pd.DataFrame) -> str:
    rows = []
    for _, r in frame.iterrows():
        rows.append([r["series"], r["panel"], fmt_len(r["seq_len"]), r.get("batch", ""),
                     (r["status"], f"status-{r['status']}"), fmt_bytes(r["predicted_peak_bytes"]),
                     fmt_bytes(r["measured_peak_bytes"]), fmt_ms(r["time_ms"]), (r["reason"], "reason")])
    return table(["variant", "mode", "length", "batch", "status", "predicted peak", "measured peak",
                  "fwd+bwd time", "reason"], rows, cls="points", text_cols=(1, 4, 8))


def manifest_table(manifest: dict) -> str:
    flat = _flatten(manifest)
    if not flat:
        return "<p>No manifest.json in this run.</p>"
    return table(["key", "value"], [[k, v] for k, v in flat.items()], cls="manifest", text_cols=(1,))


def _flatten(data, prefix: str = "") -> dict:
    out = {}
    for key, value in (data.items() if isinstance(data, dict) else []):
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = "" if value is None else (", ".join(map(str, value)) if isinstance(value, list) else value)
    return out


def fits_summary(frame: pd.DataFrame, cap: Capacity) -> str:
    """Per budget: the longest length any series × mode reaches, and who reaches it."""
    rows = []
    for budget, gpus in cap.budgets.items():
        fits = [(s, p, cap.fits[(s, p)][budget]) for p in panels(frame) for s in series_order(frame)
                if cap.fits.get((s, p), {}).get(budget) is not None]
        if not fits:
            rows.append([f"{budget:g} GiB", gpus, "?", ""])
            continue
        best = max(f.length for *_, f in fits)
        who = [(s, p, f) for s, p, f in fits if f.length == best]
        modes: dict[str, list[str]] = {}
        for s, p, _ in who:
            modes.setdefault(s, []).append(p)
        names = "; ".join(f"{s} ({', '.join(ps)})" for s, ps in modes.items())
        verified = all(f.verified for *_, f in who)
        text = fit_text(who[0][2]) + ("" if verified else " (extrapolated)")
        rows.append([f"{budget:g} GiB", gpus, (text, "" if verified else "pred"), names])
    return table(["budget", "about the memory of", "longest length", "reached by: variant (modes)"], rows,
                 cls="summary", text_cols=(1, 3))
