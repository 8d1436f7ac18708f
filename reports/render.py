"""``attnprof report RUN_DIR``: the HTML page and PNG charts of a run, optionally against
a baseline run. The page answers "which attention, at what length, on which GPU"."""

from __future__ import annotations

import time
from collections import Counter
from html import escape
from pathlib import Path

from attnprof.reports import charts, page, tables
from attnprof.reports.capacity import BUDGETS_GIB, CACHE_FILE, Capacity, capacity
from attnprof.reports.data import ReportError, Run, load, one_line, panels
from attnprof.reports.diff import compare, diff_table
from attnprof.reports.scaling import slopes
from attnprof.profiler.units import GIB, fmt_bytes

__all__ = ["ReportError", "render_report"]

# What drawing the capacity chart and writing the page take after predictions stop (s).
FINISH_RESERVE_S = 1.0


def render_report(run_dir: Path, output: Path | None = None, baseline: Path | None = None, *,
                  seconds: float = 7.0) -> Path:
    """Write the report of ``run_dir`` (default ``RUN_DIR/report.html``) and its PNGs beside
    it (``<stem>-memory.png``, ...); return the HTML path. ``seconds`` is a soft target for
    the whole render: predict() calls for the capacity chart get what is left of it (one
    call may overrun it by a few seconds); 0 turns them off, a minute verifies most runs."""
    start = time.monotonic()
    run = load(run_dir)
    base = load(baseline, role="baseline") if baseline is not None else None
    output = Path(output) if output is not None else run.path / "report.html"
    if output.is_dir():
        raise ReportError(f"output {output} is a folder; give a file name such as report.html")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        images, cap = _draw(run, output, start, seconds)
        sections = _sections(run, cap, base, images)
        html = page.document(f"attnprof report: {_run_name(run)}", _meta(run, base), sections)
        output.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ReportError(one_line(f"cannot write the report to {output}: {exc}")) from None
    return output


def _draw(run: Run, output: Path, start: float, seconds: float) -> tuple[dict, Capacity]:
    """Save each chart as a PNG beside the page (name -> path, for those drawn); the
    capacity predictions get the time left after the other charts."""
    frame, drawn = run.frame, {}
    for name, draw in (("memory", charts.memory_chart), ("time", charts.time_chart), ("savings", charts.savings_chart)):
        _save(draw(frame), output, name, drawn)
    left = max(0.0, seconds - (time.monotonic() - start) - FINISH_RESERVE_S)
    cap = capacity(frame, run.path, seconds=left, budgets=_budgets(run))
    _save(charts.capacity_chart(frame, cap), output, "capacity", drawn)
    return drawn, cap


def _budgets(run: Run) -> dict:
    """The standard budgets, plus the memory of the GPU this run measured on, if it names one."""
    env = _section_of(run.manifest, "environment")
    memory = env.get("device_memory_bytes")
    budgets = dict(BUDGETS_GIB)
    if isinstance(memory, (int, float)) and memory > 0:
        budgets[round(memory / GIB, 1)] = f"this run's {env.get('device_name') or 'GPU'}"
    return dict(sorted(budgets.items()))


def _save(fig, output: Path, name: str, drawn: dict) -> None:
    path = output.with_name(f"{output.stem}-{name}.png")
    if fig is None:
        path.unlink(missing_ok=True)  # no stale chart from an earlier render
    else:
        drawn[name] = charts.save(fig, path)


def _section_of(manifest: dict, name: str) -> dict:
    value = manifest.get(name)
    return value if isinstance(value, dict) else {}


def _run_name(run: Run) -> str:
    return str(_section_of(run.manifest, "scenario").get("name") or run.path.resolve().name)


def _meta(run: Run, base: Run | None) -> list[str]:
    counts = Counter(run.frame["status"])
    env = _section_of(run.manifest, "environment")
    names = sorted(set(run.frame["device_name"].dropna().astype(str)) - {""}) if "device_name" in run.frame else []
    device = env.get("device_name") or ", ".join(names) or "unknown"
    memory = env.get("device_memory_bytes")
    device += f" ({fmt_bytes(memory)})" if isinstance(memory, (int, float)) and memory > 0 else ""
    lines = [f"Run folder: {run.path}",
             f"{len(run.frame)} points: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()) + f". Device: {device}."]
    if base is not None:
        lines.append(f"Compared with baseline: {base.path}")
    return lines


def _sections(run: Run, cap: Capacity, base: Run | None, images: dict) -> list[page.Section]:
    frame = run.frame
    sections = [page.Section("fits", "What fits where", _fits(frame, cap)),
                page.Section("charts", "Charts", _charts(images)),
                page.Section("scaling", "Scaling", tables.slope_table(slopes(frame)) + page.paragraph(SCALING_NOTE, "note"))]
    pivots = []
    for panel in panels(frame):
        pivots += [f"<h3>{escape(panel)}: peak memory</h3>", _scroll(tables.pivot(frame, panel, "memory")),
                   f"<h3>{escape(panel)}: forward + backward time</h3>", _scroll(tables.pivot(frame, panel, "time"))]
    pivots.append(page.paragraph("Italic: predicted, not measured. Failed points show their status.", "note"))
    sections.append(page.Section("tables", "Variant × length", "\n".join(pivots)))
    if base is not None:
        sections.append(page.Section("baseline", "Against the baseline", _against(run, base)))
    sections.append(page.Section("points", "Every point", _scroll(tables.points_table(frame))))
    sections.append(page.Section("environment", "Environment", _scroll(tables.manifest_table(run.manifest))))
    return sections


def _fits(frame, cap: Capacity) -> str:
    total = sum(len(f) for f in cap.fits.values())
    extrapolated = sum(1 for fits in cap.fits.values() for f in fits.values() if f and not f.verified)
    note = (f"Longest power-of-two length whose predicted peak tensor memory fits each budget, at this run's "
            f"shape, searched up to 1M tokens. Prediction is exact tensor accounting under fake tensors; the "
            f"CUDA context (some hundreds of MiB), allocator caching and fragmentation come on top, so keep a "
            f"margin. {cap.calls} prediction(s) ran for this render in {cap.seconds:.1f} s (cached in "
            f"{CACHE_FILE} for later renders).")
    if extrapolated:
        note += (f" {extrapolated} of {total} figures are extrapolated (~, italic) from the lengths predicted so "
                 f"far, and extrapolation from short lengths can be far off (stepwise strides, large constants): "
                 f"render with more time (render_report(..., seconds=60)) to predict every boundary.")
    html = [tables.fits_summary(frame, cap), page.paragraph(note, "note")]
    html += [page.paragraph(f"No predictions for {s} · {p}: {why}", "note") for (s, p), why in cap.problems.items()]
    return "\n".join(html)


def _against(run: Run, base: Run) -> str:
    html = diff_table(compare(run.frame, base.frame))
    here, there = (str(_section_of(r.manifest, "environment").get("device_name") or "") for r in (run, base))
    if here != there:
        html = page.paragraph(f"The runs measured on different devices ({there or 'unknown'} before, "
                              f"{here or 'unknown'} now): time changes say little.", "note") + html
    return html


SCALING_NOTE = (
    "Slopes are least-squares fits of log(value) on log(length) over ok points: memory on measured peaks "
    "(italic: on predicted ones), time on median forward + backward. The expected exponents are each "
    "variant's complexity at scope attention (default options). At scope model the stack adds terms "
    "linear in length (projections, feed-forward, norms, residuals) and constant ones (parameters), so "
    "fitted memory slopes there fall short of the expected exponent at short lengths and near it only "
    "at long ones. Highlighted: scope attention slopes more than 0.25 off. '?': not a built-in variant "
    "(a report never imports a plug-in named in a results file) or one this installation cannot resolve.")
CAPTIONS = {
    "memory": "Peak memory against sequence length, log-log, one panel per mode. Solid lines and filled markers: "
              "measured; dashed lines and hollow markers: predicted; x: a point that did not finish "
              "(oom, timeout, crashed, skipped, error), drawn at its predicted peak. On CPU the measured "
              "peak equals the predicted one to the byte, so the two coincide.",
    "time": "Median forward + backward time against sequence length, log-log, ok points only.",
    "savings": "Peak memory saved by checkpoint and reversible against plain, same variant and length; "
               "hollow markers: on predicted peaks (the plain or the other point was not measured).",
    "capacity": "Longest power-of-two length whose predicted peak fits each memory budget. '~' and italic: "
                "extrapolated beyond the lengths predicted so far.",
}


def _charts(images: dict) -> str:
    if not images:
        return page.paragraph("Nothing to draw: no point has a peak or a time.")
    return "\n".join(page.image(path, f"{name} chart", CAPTIONS[name]) for name, path in images.items())


def _scroll(html: str) -> str:
    return f'<div class="scroll">{html}</div>'
