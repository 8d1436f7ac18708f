"""HTML tables of a run. Every value is escaped here, once, by ``cell``; callers pass
plain text and a CSS class, never markup."""

from __future__ import annotations

import pandas as pd

from attnprof.reports.page import esc
from attnprof.reports.capacity import GPU_MODEL, MAX_EXP, MIN_EXP, Capacity, fit_text
from attnprof.reports.data import multi_device, panels, series_order
from attnprof.reports.scaling import Slope
from attnprof.reports.time_accuracy import GOAL_MEDIAN_FACTOR, GroupError, fmt_factor, fmt_ratio
from attnprof.profiler.records import step_time_ms
from attnprof.profiler.units import fmt_bytes, fmt_len, fmt_ms, missing


def cell(value, cls: str = "", tag: str = "td", title: str = "") -> str:
    attrs = (f' class="{esc(cls)}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
    return f"<{tag}{attrs}>{esc('' if missing(value) else value)}</{tag}>"


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
        body.append(f'<tr{f" class={chr(34)}{esc(rc)}{chr(34)}" if rc else ""}>{"".join(cells)}</tr>')
    return (f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def pivot(frame: pd.DataFrame, panel: str, what: str) -> str:
    """Series × length for one panel: peak memory (``what='memory'``) or time (``'time'``)."""
    rows_of = frame[frame["panel"] == panel]
    lengths = sorted(rows_of["seq_len"].unique())
    by_device = multi_device(frame)
    rows = []
    for s in series_order(rows_of):
        mine = rows_of[rows_of["series"] == s]
        row = [s] + ([mine["device_label"].iloc[0]] if by_device else [])
        for n in lengths:
            hit = mine[mine["seq_len"] == n]
            row.append(_pivot_cell(hit.iloc[0], what) if len(hit) else ("", "na"))
        rows.append(row)
    return table(["variant"] + (["device"] if by_device else []) + [fmt_len(n) for n in lengths], rows,
                 cls="pivot", text_cols=(1,) if by_device else ())


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
    """Every point; a device column where the rows name more than one device."""
    by_device = multi_device(frame)
    rows = []
    for _, r in frame.iterrows():
        rows.append([r["series"], r["panel"]] + ([r["device_label"]] if by_device else [])
                    + [fmt_len(r["seq_len"]), r.get("batch", ""),
                       (r["status"], f"status-{r['status']}"), fmt_bytes(r["predicted_peak_bytes"]),
                       fmt_bytes(r["measured_peak_bytes"]), fmt_ms(r["time_ms"]), (r["reason"], "reason")])
    k = 1 if by_device else 0
    return table(["variant", "mode"] + (["device"] if by_device else []) + [
        "length", "batch", "status", "predicted peak", "measured peak", "fwd+bwd time", "reason"], rows,
        cls="points", text_cols=(1, *range(2, 2 + k), 4 + k, 8 + k))


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


def _longest(fits: list) -> list:
    """From (series, mode, fit) triples: the longest length's cell (italic when any of its
    figures is extrapolated) and who reaches it, as "variant (modes); ..."."""
    best = max(f.length for *_, f in fits)
    who = [(s, p, f) for s, p, f in fits if f.length == best]
    modes: dict[str, list[str]] = {}
    for s, p, _ in who:
        modes.setdefault(s, []).append(p)
    verified = all(f.verified for *_, f in who)
    text = fit_text(who[0][2]) + ("" if verified else " (extrapolated)")
    return [(text, "" if verified else "pred"), "; ".join(f"{s} ({', '.join(ps)})" for s, ps in modes.items())]


def fits_summary(frame: pd.DataFrame, cap: Capacity) -> str:
    """Per budget: the longest length any series × mode reaches, and who reaches it."""
    rows = []
    for budget, gpus in cap.budgets.items():
        fits = [(s, p, cap.fits[(s, p)][budget]) for p in panels(frame) for s in series_order(frame)
                if cap.fits.get((s, p), {}).get(budget) is not None]
        if not fits:
            rows.append([f"{budget:g} GiB", gpus, "?", ""])
            continue
        rows.append([f"{budget:g} GiB", gpus, *_longest(fits)])
    return table(["budget", "about the memory of", "longest length", "reached by: variant (modes)"], rows,
                 cls="summary", text_cols=(1, 3))


def gpu_fits_summary(frame: pd.DataFrame, cap: Capacity) -> str:
    """Per named GPU: the longest length any series × mode reaches on it, by the GPU
    memory model's total against the GPU's memory, and who reaches it."""
    rows = []
    for key, spec in cap.gpus.items():
        fits = [(s, p, cap.fits[(s, p)][key]) for p in panels(frame) for s in series_order(frame)
                if cap.fits.get((s, p), {}).get(key) is not None]
        head = [spec.label, spec.name, fmt_bytes(spec.memory_bytes)]
        if not fits:
            rows.append(head + ["?", ""])
            continue
        rows.append(head + _longest(fits))
    return table(["GPU", "name", "memory", f"longest length, {GPU_MODEL}", "reached by: variant (modes)"], rows,
                 cls="summary gpu-model", text_cols=(1, 4))


def gpu_model_table(frame: pd.DataFrame, cap: Capacity) -> str:
    """The GPU model's own figures at the lengths it predicted for the capacity search:
    per series × mode × GPU, the longest length that fits, the modelled total and
    allocated peak there, the SDPA kernel, and what the next length up would need."""
    rows = []
    for p in panels(frame):
        for s in series_order(frame):
            for key, spec in cap.gpus.items():
                if (s, p) not in cap.fits:
                    continue
                fit = cap.fits[(s, p)].get(key)
                figures = cap.model.get((s, p, key), {})
                here = figures.get(fit.length) if fit and fit.length else None
                nxt = (fit.length * 2 if fit.length else 1 << MIN_EXP) if fit and not fit.at_cap else None
                up = figures.get(nxt) if nxt else None
                if fit is None:
                    beyond = ""
                elif fit.at_cap:
                    beyond = f"fits at {fmt_len(1 << MAX_EXP)}, the longest searched"
                elif up is None:
                    beyond = f"{fmt_len(nxt)}: not yet predicted"
                else:
                    beyond = (f"{fmt_len(nxt)} needs {fmt_bytes(up['gpu_total_bytes'])}"
                              + ("" if up["gpu_fits"] else ": out of memory"))
                cls = "" if fit is not None and fit.verified else "pred"
                rows.append([s, p, key, (fit_text(fit), cls),
                             fmt_bytes(here["gpu_total_bytes"]) if here else "",
                             fmt_bytes(here["gpu_allocated_peak_bytes"]) if here else "",
                             (here["gpu_sdpa_backend"] or "-") if here else "",
                             fmt_ms(step_time_ms(here.get("gpu_time_fwd_ms"), here.get("gpu_time_bwd_ms")), "")
                             if here else "", (beyond, "reason")])
    return table(["variant", "mode", "GPU", "longest length", "total there", "allocated peak there", "SDPA kernel",
                  "step time there (model)", "next length up"], rows, cls="gpu-model", text_cols=(1, 2, 6, 8))


def time_error_table(groups: list[GroupError]) -> str:
    """Per variant, furthest off first: how many points are scored, the typical signed
    error (predicted ÷ measured) and the one furthest off; highlighted where the median
    misses the median goal."""
    rows = []
    for g in groups:
        off = "off" if max(g.median_ratio, 1 / g.median_ratio) > GOAL_MEDIAN_FACTOR else ""
        rows.append([g.key[0], g.count, (fmt_ratio(g.median_ratio), off), fmt_factor(g.median_factor),
                     fmt_ratio(g.worst_ratio)])
    return table(["variant", "scored points", "median predicted ÷ measured", "median |error|", "furthest off"],
                 rows, cls="time-errors", text_cols=(2, 4))
