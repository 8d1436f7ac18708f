"""The report's PNG charts, drawn on matplotlib ``Figure`` objects (no pyplot, no global
backend state), saved at a fixed DPI. Each function returns a Figure, or None when the
run holds nothing to draw."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from attnprof.profiler.safeio import write_atomic
from attnprof.reports.capacity import GPU_MODEL, MAX_EXP, MIN_EXP, Capacity, fit_text
from attnprof.reports.data import panels, series_order
from attnprof.reports.palette import colours, markers
from attnprof.reports import time_accuracy
from attnprof.profiler.units import fmt_bytes, fmt_len, fmt_ms, mpl_text

DPI = 110  # fixed: the same run renders the same pixels
PANEL_W, PANEL_H, LEGEND_W = 3.8, 3.6, 2.8  # inches
SAVED_MODES = ("checkpoint", "reversible")


def save(fig: Figure, path: Path) -> bytes:
    """The PNG of ``fig``, written to ``path`` without following a planted link (drawn into
    memory, then ``safeio.write_atomic``); returns its bytes for the page."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    data = buffer.getvalue()
    write_atomic(path, data)
    return data


def legend_label(text: str, width: int = 26) -> str:
    """Long option labels wrap at commas: 'lsh[n_hashes=8,' / 'bucket_size=64]'. A label
    starting with '_' gets a leading space: matplotlib would drop it from the legend."""
    text = mpl_text(text)
    text = " " + text if text.startswith("_") else text
    return "\n".join(textwrap.wrap(text.replace(",", ", "), width)) or text


def _figure(n_panels: int, height: float = PANEL_H, sharey: bool = True) -> tuple[Figure, list]:
    """One row of panels sharing the y axis (modes compare at a glance), legend space right."""
    fig = Figure(figsize=(PANEL_W * n_panels + LEGEND_W, height), layout="constrained")
    axes = fig.subplots(1, n_panels, squeeze=False, sharey=sharey)[0]
    return fig, list(axes)


def _length_axis(ax, lengths) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(n) for n in lengths))
    step = max(1, len(ticks) // 8)  # at most ~8 labels per panel
    ax.xaxis.set_major_locator(FixedLocator(ticks[::step]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_len(int(round(v)))))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("sequence length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _log_axis(ax, fmt, base: int, subs=(1.0,)) -> None:
    ax.set_yscale("log", base=base)
    ax.yaxis.set_major_locator(LogLocator(base=base, subs=subs, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    ax.yaxis.set_minor_locator(NullLocator())


def _series_legend(fig, order, col, mark, extra=()) -> None:
    handles = [Line2D([], [], color=col[s], marker=mark[s], label=legend_label(s)) for s in order]
    fig.legend(handles=handles + list(extra), loc="outside right upper", fontsize=8, frameon=False)


def memory_chart(frame: pd.DataFrame) -> Figure | None:
    """Peak bytes against length, log-log: measured solid and filled, predicted dashed and
    hollow, points that did not finish as x at their predicted peak."""
    if frame["peak_bytes"].notna().sum() == 0:
        return None
    order, names = series_order(frame), panels(frame)
    col, mark = colours(order), markers(order)
    fig, axes = _figure(len(names))
    for ax, panel in zip(axes, names):
        for s in order:
            rows = frame[(frame["panel"] == panel) & (frame["series"] == s)].sort_values("seq_len")
            pred, ok = rows.dropna(subset=["predicted_peak_bytes"]), rows[rows["status"] == "ok"]
            ax.plot(pred["seq_len"], pred["predicted_peak_bytes"], ls="--", marker=mark[s], ms=8,
                    mfc="none", color=col[s], lw=1)
            meas = ok.dropna(subset=["measured_peak_bytes"])
            ax.plot(meas["seq_len"], meas["measured_peak_bytes"], ls="-", marker=mark[s], ms=4, color=col[s], lw=1.5)
            bad = pred[pred["status"] != "ok"]
            ax.plot(bad["seq_len"], bad["predicted_peak_bytes"], ls="none", marker="x", ms=9, mew=2, color=col[s])
        ax.set_title(mpl_text(panel))
        _length_axis(ax, frame["seq_len"])
        _log_axis(ax, fmt_bytes, 2)
    axes[0].set_ylabel("peak memory (bytes)")
    key = [Line2D([], [], color="k", ls="-", marker="o", ms=4, label="measured"),
           Line2D([], [], color="k", ls="--", marker="o", ms=8, mfc="none", label="predicted"),
           Line2D([], [], color="k", ls="none", marker="x", ms=9, mew=2, label="not ok (oom, timeout,\n"
                  "crashed, skipped, error)\nat its predicted peak")]
    _series_legend(fig, order, col, mark, key)
    return fig


def time_chart(frame: pd.DataFrame) -> Figure | None:
    """Median forward + backward time against length, log-log, ok points only."""
    ok = frame[(frame["status"] == "ok") & frame["time_ms"].notna()]
    if ok.empty:
        return None
    order, names = series_order(frame), panels(frame)
    col, mark = colours(order), markers(order)
    fig, axes = _figure(len(names))
    for ax, panel in zip(axes, names):
        for s in order:
            rows = ok[(ok["panel"] == panel) & (ok["series"] == s)].sort_values("seq_len")
            ax.plot(rows["seq_len"], rows["time_ms"], marker=mark[s], ms=5, color=col[s], lw=1.5)
        ax.set_title(mpl_text(panel))
        _length_axis(ax, frame["seq_len"])
        _log_axis(ax, fmt_ms, 10, subs=(1.0, 2.0, 5.0))
    axes[0].set_ylabel("forward + backward time (median)")
    _series_legend(fig, order, col, mark)
    return fig


def time_accuracy_chart(frame: pd.DataFrame) -> Figure | None:
    """Predicted against measured forward + backward time, log-log, one marker per ok point
    with a prediction (hollow: measured under the scoring floor), the identity line and
    the x1.5 and x2.5 bands of the goals; None when no point has a prediction."""
    found = time_accuracy.pairs(frame.to_dict("records"), label_field="series")
    if not found:
        return None
    order = series_order(frame)
    col, mark = colours(order), markers(order)
    fig, (ax,) = _figure(1, height=PANEL_H + 0.6)
    for s in [s for s in order if any(p.label == s for p in found)]:
        mine = [p for p in found if p.label == s]
        for scored in (True, False):
            part = [p for p in mine if (p.measured_ms >= time_accuracy.MIN_MEASURED_MS) == scored]
            ax.plot([p.measured_ms for p in part], [p.predicted_ms for p in part], ls="none", marker=mark[s],
                    ms=6, color=col[s], mfc=col[s] if scored else "none")
    values = [v for p in found for v in (p.measured_ms, p.predicted_ms)]
    low, high = min(values) / 1.5, max(values) * 1.5
    line = np.array([low, high])
    ax.plot(line, line, color="k", lw=1)
    for factor, grey in ((time_accuracy.GOAL_MEDIAN_FACTOR, "0.35"), (time_accuracy.GOAL_P90_FACTOR, "0.65")):
        for y in (line * factor, line / factor):
            ax.plot(line, y, color=grey, lw=1, ls="--")
    if low < time_accuracy.MIN_MEASURED_MS:
        ax.axvspan(low, min(high, time_accuracy.MIN_MEASURED_MS), color="0.92", lw=0, zorder=0)
    ax.set_xscale("log")
    _log_axis(ax, fmt_ms, 10, subs=(1.0, 2.0, 5.0))  # the y axis; the x axis alike, fewer labels across:
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,) if high / low > 300 else (1.0, 3.0), numticks=8))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ms(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("measured forward + backward (median)")
    ax.set_ylabel("predicted forward + backward")
    floor = f"{time_accuracy.MIN_MEASURED_MS:g} ms"
    key = [Line2D([], [], color="k", lw=1, label="predicted = measured"),
           Line2D([], [], color="0.35", lw=1, ls="--", label=f"×{time_accuracy.GOAL_MEDIAN_FACTOR:g} (median goal)"),
           Line2D([], [], color="0.65", lw=1, ls="--", label=f"×{time_accuracy.GOAL_P90_FACTOR:g} (p90 goal)"),
           Line2D([], [], color="k", ls="none", marker="o", ms=6, mfc="none",
                  label=f"measured < {floor}\n(grey area): not scored")]
    _series_legend(fig, [s for s in order if any(p.label == s for p in found)], col, mark, key)
    return fig


def savings_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Memory saved by each of SAVED_MODES against ``plain``, same series and length, in %:
    on measured peaks where both are measured, else on predicted ones."""
    model = frame[frame["scope"] == "model"]
    plain = model[model["mode"] == "plain"]
    out = []
    for mode in SAVED_MODES:
        other = model[model["mode"] == mode]
        both = other.merge(plain, on=["series", "seq_len"], suffixes=("", "_plain"))
        for _, r in both.iterrows():
            measured = not (pd.isna(r["measured_peak_bytes"]) or pd.isna(r["measured_peak_bytes_plain"]))
            col = "measured_peak_bytes" if measured else "predicted_peak_bytes"
            if pd.isna(r[col]) or pd.isna(r[col + "_plain"]) or not r[col + "_plain"]:
                continue
            out.append({"mode": mode, "series": r["series"], "seq_len": int(r["seq_len"]), "measured": measured,
                        "saved_pct": 100.0 * (1.0 - r[col] / r[col + "_plain"])})
    return pd.DataFrame(out, columns=["mode", "series", "seq_len", "measured", "saved_pct"])


def savings_chart(frame: pd.DataFrame) -> Figure | None:
    saved = savings_table(frame)
    if saved.empty:
        return None
    order = [s for s in series_order(frame) if s in set(saved["series"])]
    col, mark = colours(series_order(frame)), markers(series_order(frame))
    modes = [m for m in SAVED_MODES if m in set(saved["mode"])]
    fig, axes = _figure(len(modes))
    for ax, mode in zip(axes, modes):
        for s in order:
            rows = saved[(saved["mode"] == mode) & (saved["series"] == s)].sort_values("seq_len")
            ax.plot(rows["seq_len"], rows["saved_pct"], ls="-", color=col[s], lw=1.5)
            for measured, part in rows.groupby("measured"):
                ax.plot(part["seq_len"], part["saved_pct"], ls="none", marker=mark[s], ms=5 if measured else 8,
                        mfc=col[s] if measured else "none", color=col[s])
        ax.axhline(0, color="k", lw=0.8)
        ax.set_title(f"{mode} vs plain")
        _length_axis(ax, saved["seq_len"])
    axes[0].set_ylabel("peak memory saved vs plain (%)")
    key = [Line2D([], [], color="k", ls="none", marker="o", ms=5, label="on measured peaks"),
           Line2D([], [], color="k", ls="none", marker="o", ms=8, mfc="none", label="on predicted peaks")]
    _series_legend(fig, order, col, mark, key)
    return fig


def capacity_chart(frame: pd.DataFrame, cap: Capacity) -> Figure | None:
    """Longest power-of-two length that fits each budget: one heat map per mode, rows
    are series, columns budgets (or named GPUs, by the GPU memory model: the figure says
    so); '~' marks a figure extrapolated rather than predicted."""
    order, names = series_order(frame), panels(frame)
    budgets = list(cap.budgets)
    upright = bool(cap.gpus) and len(budgets) <= 4  # a few GPUs: 'key' over 'memory', level
    fig, axes = _figure(len(names), height=1.9 + 0.32 * len(order) + (0.6 if cap.gpus else 0.0), sharey=False)
    grids = {p: [[cap.fits.get((s, p), {}).get(b) for b in budgets] for s in order] for p in names}
    ran = {p: [(s, p) in cap.fits for s in order] for p in names}
    lengths = [f.length for rows in grids.values() for row in rows for f in row if f and f.length]
    low = max(MIN_EXP, int(np.log2(min(lengths))) - 1) if lengths else MIN_EXP  # colour where the data is
    image = None
    for ax, panel in zip(axes, names):
        fits = grids[panel]
        grid = np.array([[np.log2(f.length) if f and f.length else np.nan for f in row] for row in fits])
        image = ax.imshow(grid, cmap="viridis", vmin=low, vmax=MAX_EXP, aspect="auto")
        for i, row in enumerate(fits):
            for j, f in enumerate(row):
                dark = f is not None and f.length and np.log2(f.length) < (low + MAX_EXP) / 2
                ax.text(j, i, fit_text(f, ran[panel][i]), ha="center", va="center", fontsize=8,
                        color="white" if dark else "black", style="normal" if f and f.verified else "italic")
        labels = [mpl_text(cap.label(b).replace(" (", "\n(") if upright else cap.label(b)) for b in budgets]
        ax.set_xticks(range(len(budgets)), labels, rotation=0 if upright else 45, ha="center" if upright else "right")
        ax.set_yticks(range(len(order)), [legend_label(s, 30) for s in order] if ax is axes[0] else [])
        ax.set_title(mpl_text(panel))
    absent = "     – not in this run" if not all(all(r) for r in ran.values()) else ""
    what = (f"GPU (its memory); what must fit: CUDA context + simulated allocator reserved, {GPU_MODEL}"
            if cap.gpus else "memory budget (tensor bytes)")
    key = (f"~ extrapolated, not yet predicted     {fmt_len(1 << MAX_EXP)}+ fits at {fmt_len(1 << MAX_EXP)}, "
           f"the longest searched{absent}")
    width = int(fig.get_figwidth() * 12)  # characters of 9-point text across the figure
    fig.supxlabel("\n".join(textwrap.wrap(what, width) + textwrap.wrap(key, width)), fontsize=9)
    if cap.gpus:
        fig.suptitle(f"Longest length that fits each GPU, {GPU_MODEL}", fontsize=10)
    cbar = fig.colorbar(image, ax=axes, location="right", shrink=0.9)
    ticks = range(low + (MAX_EXP - low) % 2, MAX_EXP + 1, 2)
    cbar.set_ticks(ticks, labels=[fmt_len(1 << e) for e in ticks])
    cbar.set_label("longest length that fits (tokens)")
    return fig
