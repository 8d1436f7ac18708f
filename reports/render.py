"""``attnprof report RUN_DIR``: the HTML page and PNG charts of a run, optionally against
a baseline run. The page answers "which attention, at what length, on which GPU"."""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable
from pathlib import Path

from attnprof.profiler import safeio
from attnprof.reports import charts, page, peak_table, tables, time_accuracy
from attnprof.reports.page import esc
from attnprof.reports.capacity import BUDGETS_GIB, CACHE_FILE, GPU_CACHE_FILE, GPU_MODEL, Capacity, capacity
from attnprof.reports.data import ReportError, Run, devices, load, multi_device, one_line, panels, skipped_note
from attnprof.reports.diff import compare, diff_table
from attnprof.reports.peak_table import peak_split_table
from attnprof.reports.render_cache import CHARTS
from attnprof.reports.scaling import slopes
from attnprof.reports.timeline_points import named
from attnprof.profiler.units import GIB, REPORT_SECONDS, fmt_bytes

__all__ = ["ReportError", "render_report"]

# What drawing the capacity chart and writing the page take after predictions stop (s).
FINISH_RESERVE_S = 1.0


def render_report(run_dir: Path, output: Path | None = None, baseline: Path | None = None, *,
                  seconds: float = REPORT_SECONDS, gpus: list | None = None, warn: Callable[[str], None] | None = None,
                  timeline_points=()) -> Path:
    """Write the report of ``run_dir`` (default ``RUN_DIR/report.html``) and its PNGs beside
    it (``<stem>-memory.png``, ...); return the HTML path. ``seconds`` is a soft target for
    the whole render: predict() calls for the capacity chart get what is left of it (one
    call may overrun it by a few seconds); 0 turns them off, a minute verifies most runs.
    ``gpus`` (``profiler.hardware.gpus.GpuSpec``s): "what fits where" and the capacity chart
    are per named GPU, by the GPU memory model, instead of per generic budget.
    ``timeline_points``: labels of points (reports/timeline_points.py) whose memory over a
    step the timeline chart draws besides the longest ok point of each variant; that chart
    has a budget of its own (``TIMELINE_SECONDS``), not what the capacity phase leaves.

    Invalid records are left out and said so: one line to ``warn`` and a note on the page.
    Nothing is written through a link planted in the run folder (``safeio``): the page,
    its charts and the render caches are refused, in one line, before any work."""
    start = time.monotonic()
    warn = warn or (lambda line: None)
    run = load(run_dir)
    base = load(baseline, role="baseline") if baseline is not None else None
    named_output = output is not None  # probed (safeio): a place the user named, not the untrusted run folder
    output = Path(output) if output is not None else run.path / "report.html"
    safeio.check_file_writable(output, "the report", probe=named_output)  # a name too long, a read-only folder
    if output.is_dir():
        raise ReportError(f"output {output} is a folder; give a file name such as report.html")
    _refuse_links(run, output)
    named(run.frame, timeline_points)  # an unknown label: one line, before any work
    notes = [skipped_note(r.skipped, role) for r, role in ((run, "run"), (base, "baseline")) if r and r.skipped]
    for note in notes:
        warn(f"warning: {note}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        images, cap = _draw(run, output, start, seconds, gpus or [], warn, timeline_points)
        sections = _sections(run, cap, base, images)
        html = page.document(f"attnprof report: {_run_name(run)}", _meta(run, base) + notes, sections)
        safeio.write_atomic(output, html.encode("utf-8"))
    except OSError as exc:
        raise ReportError(one_line(f"cannot write the report to {output}: {exc}")) from None
    return output


def _chart_path(output: Path, name: str) -> Path:
    return output.with_name(f"{output.stem}-{name}.png")


def _refuse_links(run: Run, output: Path) -> None:
    """LinkRefused (one line, exit 2) for any file the render would write or remove that
    is a symbolic link: checked before any work, and again as each file is written."""
    for path in [output, *(_chart_path(output, n) for n in CHARTS), run.path / CACHE_FILE, run.path / GPU_CACHE_FILE]:
        safeio.refuse_link(path)
        safeio.refuse_link(path.with_name(path.name + ".tmp"))


def _draw(run: Run, output: Path, start: float, seconds: float, gpus: list, warn, names=()) -> tuple[dict, Capacity]:
    """Save each chart as a PNG beside the page (name -> its bytes, for those drawn); the
    capacity predictions get the time left after the other charts, the timeline chart its
    own budget (its points are few, and each is costed before it runs)."""
    frame, drawn = run.frame, {}
    for name, draw in (("memory", charts.memory_chart), ("time", charts.time_chart), ("savings", charts.savings_chart),
                       (TIME_ACCURACY, charts.time_accuracy_chart)):
        _save(draw(frame), output, name, drawn)
    left = max(0.0, seconds - (time.monotonic() - start) - FINISH_RESERVE_S)
    cap = capacity(frame, run.path, seconds=left, budgets=_budgets(run), gpus=gpus, warn=warn)
    _save(charts.capacity_chart(frame, cap), output, "capacity", drawn)
    _save(_timeline(frame, seconds, drawn, warn, names), output, TIMELINE, drawn)
    return drawn, cap


def _timeline(frame, seconds: float, drawn: dict, warn, names=()):
    """The memory-over-a-step chart (reports/timeline_chart.py); its note (which points it
    drew, which it left out and why) kept in ``drawn`` beside the images."""
    from attnprof.profiler.timemodel.machine import machine_rates
    from attnprof.reports.timeline_chart import timeline_chart

    timed = seconds > 0 or bool(names)
    fig, note = timeline_chart(frame, seconds, rates=machine_rates(measure=False) if timed else None, warn=warn,
                               names=names)
    if note and timed:  # seconds 0 and nothing named: predictions off, no section
        drawn[TIMELINE_NOTE] = note
    return fig


def _budgets(run: Run) -> dict:
    """The standard budgets, plus the memory of each GPU this run measured on, if it names one."""
    budgets = dict(BUDGETS_GIB)
    for env in _environments(run):
        memory = env.get("device_memory_bytes")
        if isinstance(memory, (int, float)) and not isinstance(memory, bool) and 0 < memory < 1 << 60:
            budgets[round(memory / GIB, 1)] = f"this run's {env.get('device_name') or 'GPU'}"
    return dict(sorted(budgets.items()))


def _environments(run: Run) -> list[dict]:
    """The manifest's environment section, or each GPU type's (a --gpu-types folder)."""
    if run.parts:
        return [_section_of(m, "environment") for m in _section_of(run.manifest, "gpu_types").values()
                if isinstance(m, dict)]
    return [_section_of(run.manifest, "environment")]


def _save(fig, output: Path, name: str, drawn: dict) -> None:
    path = _chart_path(output, name)
    if fig is None:
        safeio.refuse_link(path)
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
    if multi_device(run.frame):
        device = f"{len(devices(run.frame))} devices side by side, " + ", ".join(devices(run.frame))
    else:
        device = env.get("device_name") or ", ".join(names) or "unknown"
        memory = env.get("device_memory_bytes")
        device += f" ({fmt_bytes(memory)})" if isinstance(memory, (int, float)) and memory > 0 else ""
    lines = [f"Run folder: {run.path}",
             f"{len(run.frame)} points: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()) + f". Device: {device}."]
    if run.parts:
        lines.append("GPU types: " + "; ".join(f"{t}: {p.name}" for t, p in run.parts.items())
                     + "".join(f"; {t}: left out ({why})" for t, why in run.missing.items()))
    if base is not None:
        lines.append(f"Compared with baseline: {base.path}")
    return lines


def _sections(run: Run, cap: Capacity, base: Run | None, images: dict) -> list[page.Section]:
    frame = run.frame
    sections = [page.Section("fits", "What fits where", _gpu_fits(frame, cap) if cap.gpus else _fits(frame, cap)),
                page.Section("charts", "Charts", _charts(images, cap)),
                *_time_model(frame, images), *_memory_over_a_step(images),
                page.Section("scaling", "Scaling", tables.slope_table(slopes(frame)) + page.paragraph(SCALING_NOTE, "note"))]
    pivots = []
    for panel in panels(frame):
        pivots += [f"<h3>{esc(panel)}: peak memory</h3>", _scroll(tables.pivot(frame, panel, "memory")),
                   f"<h3>{esc(panel)}: forward + backward time</h3>", _scroll(tables.pivot(frame, panel, "time"))]
    pivots.append(page.paragraph("Italic: predicted, not measured. Failed points show their status.", "note"))
    sections.append(page.Section("tables", "Variant × length", "\n".join(pivots)))
    split = peak_split_table(frame)  # --- issue 24: peak split --- where any record has a breakdown
    if split:
        sections.append(page.Section("peak-split", "What holds the peak",
                                     _scroll(split) + page.paragraph(peak_table.NOTE, "note")))
    if base is not None:
        sections.append(page.Section("baseline", "Against the baseline", _against(run, base)))
    sections.append(page.Section("points", "Every point", _scroll(tables.points_table(frame))))
    sections.append(page.Section("environment", "Environment", _scroll(tables.manifest_table(run.manifest))))
    return sections


def _fit_counts(cap: Capacity) -> tuple[int, int]:
    """How many fit figures the capacity holds, and how many of them are extrapolated."""
    total = sum(len(f) for f in cap.fits.values())
    extrapolated = sum(1 for fits in cap.fits.values() for f in fits.values() if f and not f.verified)
    return total, extrapolated


def _fits(frame, cap: Capacity) -> str:
    total, extrapolated = _fit_counts(cap)
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


def _gpu_fits(frame, cap: Capacity) -> str:
    """Per named GPU: the longest length whose GPU-model total fits its memory."""
    total, extrapolated = _fit_counts(cap)
    note = (f"{GPU_MODEL[0].upper()}{GPU_MODEL[1:]}: the longest power-of-two length whose modelled GPU total fits "
            f"each named GPU's memory (nvidia-smi memory.total), at this run's shape, searched up to 1M tokens. "
            f"Modelled total = CUDA context + the peak reserved by a simulated CUDA caching allocator replaying "
            f"the point's fake-tensor trace with that GPU's kernels (SDPA backend, cuBLAS workspaces); model "
            f"figures, never measured, and not the measured columns below (docs/gpu.md says what the model "
            f"covers). {cap.calls} model prediction(s) ran for this render in {cap.seconds:.1f} s (cached in "
            f"{GPU_CACHE_FILE} for later renders).")
    if extrapolated:
        note += (f" {extrapolated} of {total} figures are extrapolated (~, italic) from the lengths modelled so far: "
                 f"render with more time (attnprof report RUN --gpu ... --seconds 60) to model every boundary.")
    gpus = "; ".join(f"{g.label}: {g.name}, {fmt_bytes(g.memory_bytes)}, compute capability {g.cc_text}, CUDA context "
                     f"{fmt_bytes(g.context_bytes)}{' (estimated)' if g.context_estimated else ''}"
                     for g in cap.gpus.values())
    html = [f"<h3>{esc(f'Longest length that fits each GPU, {GPU_MODEL}')}</h3>",
            tables.gpu_fits_summary(frame, cap), page.paragraph(note, "note"),
            page.paragraph(f"GPUs ({GPU_MODEL}): {gpus}.", "note"),
            *(page.paragraph(line, "note") for line in _how_sure(cap)),
            f"<h3>{esc(f'GPU memory model per variant, mode and GPU, {GPU_MODEL}')}</h3>",
            _scroll(tables.gpu_model_table(frame, cap))]
    html += [page.paragraph(f"No model figures for {s} · {p}: {why}", "note") for (s, p), why in cap.problems.items()]
    return "\n".join(html)


def _how_sure(cap: Capacity) -> list[str]:
    """How close the GPU model came on a real GPU for each series' point at its longest
    fitting length, or why it was never checked there (profiler/hardware/checked.py)."""
    from attnprof.profiler.hardware.checked import FIELD, summary_lines

    return summary_lines([{"gpu": cap.gpus[g].label, "variant": s, "mode": p, "seq_len": n, FIELD: text}
                          for (s, p, g), (n, text) in cap.checked.items() if g in cap.gpus])


def _against(run: Run, base: Run) -> str:
    html = diff_table(compare(run.frame, base.frame))
    here, there = (", ".join(devices(r.frame)) if multi_device(r.frame) else
                   str(_section_of(r.manifest, "environment").get("device_name") or "") for r in (run, base))
    if here != there:
        html = page.paragraph(f"The runs measured on different devices ({there or 'unknown'} before, "
                              f"{here or 'unknown'} now): time changes say little.", "note") + html
    return html


SCALING_NOTE = (
    "Slopes are least-squares fits of log(value) on log(length) over ok points: memory on measured peaks "
    "(italic: on predicted ones), time on median forward + backward. The expected exponents are, for a "
    "variant with cost formulas (LSH, sparse), the same fit of its own peak-bytes and FLOP formulas at scope "
    "attention, at the series' lengths, options, shape and batch (LSH's hashing, n^2 d r / c, lifts its time "
    "above 1); for the others their asymptotic order plus the batch's slope. At scope model the stack adds terms "
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


TIME_ACCURACY = CHARTS[3]  # the chart's name: report-time-accuracy.png
TIMELINE = CHARTS[5]  # report-timeline.png: the memory over a step (its own section)
TIMELINE_NOTE = "timeline-note"  # drawn's entry for what the timeline chart left out
TIMELINE_CAPTION = ("Predicted live memory over one training step (fake tensors: the tensor tracker's allocations and "
                    "frees, each at its op's time by the time model), stacked by category, for the points named with "
                    "--timeline-point LABEL and the longest ok point of each built-in variant (as its own budget "
                    "allows; the note below names what it drew and left out); the peak marked with the op that reached it; phases shaded. A model, "
                    "never measured: `attnprof predict ... --timeline DIR` writes it as a PyTorch memory snapshot and "
                    "a Chrome trace (docs/timelines.md).")
NO_TIME_MODEL = ("No point has a predicted step time (the time model, docs/time-model.md: records from before "
                 "it, or no calibrated rates), so the report has no time-model section.")
TIME_ACCURACY_CAPTION = (
    f"Predicted against measured median forward + backward time, log-log, one marker per ok point with a "
    f"prediction (this machine's calibrated rates). Solid line: predicted = measured; dashed: "
    f"×{time_accuracy.GOAL_MEDIAN_FACTOR:g} and ×{time_accuracy.GOAL_P90_FACTOR:g} either way. Hollow markers "
    f"in the grey area: measured under {time_accuracy.MIN_MEASURED_MS:g} ms, shown but not scored.")
TIME_MODEL_NOTE = (
    f"Error of a point: ln(predicted / measured) of its forward + backward time, printed as a factor; scored over "
    f"ok points measured at {time_accuracy.MIN_MEASURED_MS:g} ms or more, where Python overhead per op and timer "
    f"noise no longer dominate. Goals: median ≤ {time_accuracy.GOAL_MEDIAN_FACTOR:g}×, 90th percentile "
    f"≤ {time_accuracy.GOAL_P90_FACTOR:g}×. 'too slow': the model predicts more time than was measured. "
    f"docs/time-model.md says what the model covers and where it is far off.")


GPU_CAPACITY_CAPTION = (f"Longest power-of-two length whose modelled GPU total (CUDA context + simulated allocator "
                        f"reserved) fits each named GPU's memory: {GPU_MODEL}, never measured. '~' and italic: "
                        f"extrapolated beyond the lengths modelled so far.")


def _charts(images: dict, cap: Capacity) -> str:
    shown = {name: data for name, data in images.items()
             if name not in (TIME_ACCURACY, TIMELINE, TIMELINE_NOTE)}  # those have their own sections
    captions = {**CAPTIONS, "capacity": GPU_CAPACITY_CAPTION} if cap.gpus else CAPTIONS
    html = [page.image(data, f"{name} chart", captions[name]) for name, data in shown.items()]
    if not shown:
        html.append(page.paragraph("Nothing to draw: no point has a peak or a time."))
    if TIME_ACCURACY not in images:
        html.append(page.paragraph(NO_TIME_MODEL, "note"))
    return "\n".join(html)


def _time_model(frame, images: dict) -> list[page.Section]:
    """The time model against measurement: its chart, the error summary against the goals
    and the signed error per variant; no section when no point has a prediction."""
    if TIME_ACCURACY not in images:
        return []
    found = time_accuracy.pairs(frame.to_dict("records"), label_field="series")
    groups = time_accuracy.by_group(found)
    html = [page.image(images[TIME_ACCURACY], "time model chart", TIME_ACCURACY_CAPTION),
            page.paragraph(time_accuracy.summary_line(time_accuracy.accuracy(found)))]
    if groups:
        html += [f"<h3>{esc('Signed error per variant, furthest off first')}</h3>",
                 _scroll(tables.time_error_table(groups))]
    html.append(page.paragraph(TIME_MODEL_NOTE, "note"))
    return [page.Section("time-model", "Time model against measurement", "\n".join(html))]


def _memory_over_a_step(images: dict) -> list[page.Section]:
    """The chart with the note of what it drew and left out; the note alone when it drew
    nothing but left points out (never a silent absence); no section at ``seconds`` 0."""
    if TIMELINE not in images and not images.get(TIMELINE_NOTE):
        return []
    html = [page.image(images[TIMELINE], "memory over a step chart", TIMELINE_CAPTION)] if TIMELINE in images else []
    if images.get(TIMELINE_NOTE):
        html.append(page.paragraph(images[TIMELINE_NOTE], "note"))
    return [page.Section("timeline", "Memory over a step (predicted)", "\n".join(html))]


def _scroll(html: str) -> str:
    return f'<div class="scroll">{html}</div>'
