"""The report's memory-over-a-step chart: for the longest ``ok`` point of each variant,
the predicted live bytes over the step (profiler/timeline: the tensor tracker's trace,
each event at its op's modelled time), stacked by category, the peak marked with its op,
forward / backward (and any other pass) shaded.

Predicted, never measured: it re-runs the point under fake tensors (built-in variants
only: a report never imports code a results file names). Which points, and the chart's own
budget, are reports/timeline_points.py's: the named ones always, the others while their
predicted cost fits, each one left out named on the page with its reason.
"""

from __future__ import annotations

import time
from typing import Optional

import pandas as pd
from matplotlib.figure import Figure

from attnprof.profiler.units import fmt_bytes, mpl_text, printable
from attnprof.reports.timeline_points import TIMELINE_SECONDS, Costs, cost_units, longest, named

PANEL_W, PANEL_H = 9.0, 2.6  # inches per variant
PHASE_SHADES = {"forward": "#e8f0fa", "backward": "#fbeee6"}  # others: light grey
CATEGORY_ORDER = ("parameters", "inputs", "gradients", "activations", "temporaries")


def longest_points(frame: pd.DataFrame) -> list:
    """(variant, Point) of the longest ok point of each built-in variant (plain mode first
    among equals), in the frame's order of variants (timeline_points.longest)."""
    return [(c.point.variant, c.point) for c in longest(frame)]


def curves(timeline) -> dict:
    """x (ms, one per allocation or free) and live bytes per category at each."""
    cats = [c for c in CATEGORY_ORDER] + sorted({a.category for a in timeline.allocations.actions} - set(CATEGORY_ORDER))
    live = dict.fromkeys(cats, 0)
    xs, ys = [], {c: [] for c in cats}
    for act in timeline.allocations.actions:
        if act.action not in ("alloc", "free_completed"):
            continue
        live[act.category] += act.size if act.action == "alloc" else -act.size
        xs.append(timeline.time_us[act.at] / 1e3)
        for c in cats:
            ys[c].append(live[c])
    return {"x": xs, "y": {c: v for c, v in ys.items() if any(v)}}


def _phases(timeline) -> list:
    """(phase name, start ms, end ms) of each run of ops in one pass."""
    from attnprof.profiler.timeline.steps import phase_name

    out = []
    for op in timeline.steps.ops:
        name = phase_name(op.run[0])
        if out and out[-1][0] == name:
            out[-1][2] = (op.start_us + op.dur_us) / 1e3
        else:
            out.append([name, op.start_us / 1e3, (op.start_us + op.dur_us) / 1e3])
    return out


def draw(timelines: list) -> Optional[Figure]:
    """One panel per (label, Timeline), titled by the label; None when there is none."""
    if not timelines:
        return None
    fig = Figure(figsize=(PANEL_W, PANEL_H * len(timelines)), layout="constrained")
    axes = fig.subplots(len(timelines), 1, squeeze=False)[:, 0]
    for ax, (label, t) in zip(axes, timelines):
        data = curves(t)
        for name, start, end in _phases(t):
            ax.axvspan(start, end, color=PHASE_SHADES.get(name, "#f0f0f0"), zorder=0)
            ax.text((start + end) / 2, 1.0, mpl_text(name), transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=7, color="#555555")
        if data["x"]:
            ax.stackplot(data["x"], *[[v / 2**20 for v in ys] for ys in data["y"].values()],
                         labels=[mpl_text(c) for c in data["y"]], step="post", alpha=0.85, zorder=2)
            totals = [sum(col) for col in zip(*data["y"].values())]
            i = max(range(len(totals)), key=totals.__getitem__)
            act = [a for a in t.allocations.actions if a.action in ("alloc", "free_completed")][i]
            j = t.op_of[act.at]
            op = t.steps.ops[j].name if j >= 0 else "(before the step)"
            ax.axvline(data["x"][i], color="black", lw=0.8, ls="--", zorder=3)
            ax.annotate(mpl_text(f"peak {fmt_bytes(totals[i])} at {op}"), (data["x"][i], totals[i] / 2**20),
                        xytext=(6, -12), textcoords="offset points", fontsize=7, zorder=4)
        unit = "ms (time model)" if t.steps.timed else "ops (no time model: 1 us each)"
        ax.set_title(mpl_text(label), fontsize=9, loc="left")
        ax.set_xlabel(unit, fontsize=8)
        ax.set_ylabel("live MiB (predicted)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left", framealpha=0.8)
    return fig


def timeline_chart(frame: pd.DataFrame, seconds: float, rates=None, warn=lambda line: None,
                   names=(), budget_s: float = TIMELINE_SECONDS) -> tuple:
    """(Figure or None, note): the chart of the points the user ``names`` (always drawn) and
    of the longest ok point of each variant within ``budget_s`` of their own, each skipped
    when its predicted trace cost would not fit what is left; ``seconds`` 0 (a render with
    predictions off) draws the named ones only. The note says which points were drawn and
    which skipped, and why; '' when there was nothing to draw."""
    asked = named(frame, names)  # TimelinePointError (one line) before any work
    if seconds <= 0 and not asked:
        return None, "not drawn: the render had no time for predictions"
    drawn, skipped, costs = [], [], Costs()
    for c in asked:
        _trace(c, rates, costs, drawn, skipped, warn)
    auto = [c for c in longest(frame) if c.label not in {a.label for a in asked}]
    if seconds <= 0:
        skipped += [(c.label, "the render had no time for predictions (seconds 0)") for c in auto]
    else:
        for c in auto:
            left, estimate = budget_s - costs.auto_s, costs.estimate_s(c.point)
            if estimate > left:
                skipped.append((c.label, f"its trace would take about {estimate:.1f} s ({cost_units(c.point):g} "
                                         f"layer-equivalents), more than the {max(0.0, left):.1f} s left of the "
                                         f"chart's {budget_s:g} s budget; name it with --timeline-point to draw it"))
                continue
            _trace(c, rates, costs, drawn, skipped, warn, auto=True)
    return draw([(c.label, t) for c, t in drawn]), _note(drawn, skipped)


def _trace(c, rates, costs, drawn: list, skipped: list, warn, auto: bool = False) -> None:
    from attnprof.profiler.timeline.build import point_timeline

    start = time.monotonic()
    try:
        drawn.append((c, point_timeline(c.point, rates=rates)))
    except Exception as exc:  # a point the fake run cannot take: said, never a failed report
        warn(f"warning: no memory timeline for {printable(c.label)}: {type(exc).__name__}")
        skipped.append((c.label, f"its fake-tensor run failed ({type(exc).__name__})"))
    spent = time.monotonic() - start
    costs.saw(c.point, spent)
    if auto:
        costs.auto_s += spent


def _note(drawn: list, skipped: list) -> str:
    if not drawn and not skipped:
        return ""
    parts = []
    if drawn:
        parts.append("Drawn: " + "; ".join(f"{c.label} ({c.why})" for c, _ in drawn) + ".")
    if skipped:
        parts.append("Not drawn: " + "; ".join(f"{label}: {why}" for label, why in skipped) + ".")
    return " ".join(parts)
