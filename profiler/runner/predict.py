"""`attnprof predict`: predicted peak bytes and FLOPs for a scenario's points, and the
longest power-of-two length that fits a memory budget."""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

from attnprof.profiler.measure.accounting import predict
from attnprof.profiler.runner.plan import series, shape_at, shape_problem
from attnprof.profiler.records import Point
from attnprof.profiler.units import fmt_bytes, fmt_flops
from attnprof.scenarios.scenario import Scenario

LONGEST_SEARCHED = 1 << 20  # budget search stops at 1M tokens unless --max-len says otherwise


def prediction_record(point: Point) -> dict:
    record = {**point.identity(), "status": "ok", "reason": ""}
    problem = shape_problem(point)
    if problem:
        return {**record, "status": "skipped", "reason": problem, "predicted_peak_bytes": None, "flops": None}
    acc = predict(point)
    return {**record, "predicted_peak_bytes": acc.peak_bytes, "predicted_breakdown_bytes": acc.breakdown_bytes,
            "largest_at_peak": acc.largest_at_peak,
            "flops_fwd": acc.flops_fwd, "flops_bwd": acc.flops_bwd, "flops": acc.flops_fwd + acc.flops_bwd,
            "prediction_method": acc.method, "predict_ms": round(acc.wall_ms, 1)}


def predict_points(scenario: Scenario) -> list[dict]:
    """Every point's prediction, spread over the CPU's cores (a fake run is single-threaded
    Python). Forking is safe here: predictions run no real kernels and touch no GPU."""
    points = [p for s in series(scenario) for p in s]
    workers = min(len(points), os.cpu_count() or 1)
    if workers < 2:
        return [prediction_record(p) for p in points]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
        return list(pool.map(prediction_record, points))


def longest_fitting(scenario: Scenario, budget_bytes: int, start: int = 256, limit: int | None = None) -> list[dict]:
    """Per variant x mode: the longest power-of-two length whose predicted peak fits.

    Peak memory grows with length for every variant, so a binary search over the
    powers of two from ``start`` to ``limit`` (default 1M tokens) finds it in a few
    predictions.
    """
    limit = limit or LONGEST_SEARCHED
    all_lengths = [start << i for i in range(64) if start << i <= limit]
    rows = []
    for points in series(scenario.override(seq_lens=(start,))):
        template = points[0]
        cache: dict[int, dict] = {}

        def point_at(n: int) -> Point:
            return Point(template.variant, template.mode, template.scope, shape_at(scenario, n), template.forward_only)

        def at(n: int) -> dict:
            if n not in cache:
                cache[n] = prediction_record(point_at(n))
            return cache[n]

        # A variant may refuse the shortest lengths (LSH needs two buckets): the search
        # starts at the first length it accepts, or a refusal would read as "does not fit".
        accepted = [i for i, n in enumerate(all_lengths) if shape_problem(point_at(n)) is None]
        lengths = all_lengths[accepted[0]:] if accepted else all_lengths

        def fits(n: int) -> bool:
            record = at(n)
            return record["status"] == "ok" and record["predicted_peak_bytes"] <= budget_bytes

        lo, hi = -1, len(lengths)  # lengths[lo] fits (or none), lengths[hi] does not (or beyond)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(lengths[mid]) else (lo, mid)
        best = at(lengths[lo]) if lo >= 0 else None
        if hi == len(lengths):
            reason = f"search stopped at the limit of {limit} tokens"
        elif at(lengths[hi])["status"] != "ok":
            reason = at(lengths[hi])["reason"]
        else:
            reason = f"{lengths[hi]} tokens would need {fmt_bytes(at(lengths[hi])['predicted_peak_bytes'])}"
        row = dict(best) if best else {**template.identity(), "seq_len": None, "predicted_peak_bytes": None}
        rows.append({**row, "budget_bytes": budget_bytes, "longest_fitting_seq_len": best and best["seq_len"],
                     "limited_by": reason})
    return rows


def format_table(rows: list[dict], budget_bytes: int | None = None) -> str:
    """A plain-text table: one line per record."""
    head = ["variant", "mode", "seq_len", "batch", "peak", "params", "grads", "activations", "temporaries", "FLOPs"]
    if budget_bytes is not None:
        head = ["variant", "mode", "longest_fit", "peak_there", "limited_by"]
    lines = [head]
    for r in rows:
        if budget_bytes is not None:
            lines.append([r["variant"], r["mode"], str(r["longest_fitting_seq_len"] or "none"),
                          fmt_bytes(r.get("predicted_peak_bytes")), r["limited_by"]])
            continue
        if r["status"] != "ok":  # the reason trails the row, outside the aligned columns
            lines.append([r["variant"], r["mode"], str(r["seq_len"]), str(r["batch"]), r["status"]]
                         + ["-"] * (len(head) - 5) + [r["reason"]])
            continue
        br = r["predicted_breakdown_bytes"]
        lines.append([r["variant"], r["mode"], str(r["seq_len"]), str(r["batch"]), fmt_bytes(r["predicted_peak_bytes"]),
                      fmt_bytes(br["parameters"] + br["inputs"]), fmt_bytes(br["gradients"]),
                      fmt_bytes(br["activations"]), fmt_bytes(br["temporaries"]), fmt_flops(r["flops"])])
    widths = [max(len(row[i]) for row in lines if i < len(row)) for i in range(len(head))]
    text = ["  ".join(cell.ljust(widths[i]) if i < len(widths) else cell for i, cell in enumerate(row)).rstrip()
            for row in lines]
    title = "predicted peak (fake tensors, exact tensor accounting); params column includes inputs"
    if budget_bytes is None and len(rows) == 1 and rows[0].get("largest_at_peak"):
        text.append("largest tensors live at the peak:")
        text += [f"  {fmt_bytes(t['bytes']):>11}  {t['category']:<11} {t['op']} {t['dtype']} {t['shape']}"
                 for t in rows[0]["largest_at_peak"]]
    if budget_bytes is not None:
        title = f"longest power-of-two length whose predicted peak fits in {fmt_bytes(budget_bytes)}"
    return "\n".join([title, *text])


def capacity_predictions(scenario: Scenario, budgets_gib, start: int = 16,
                         limit: int = LONGEST_SEARCHED) -> dict[str, int]:
    """Predicted peaks at exactly the lengths that decide, for each series and budget,
    the longest power of two that fits (binary search; memory grows with length).

    Returns ``point.key_text() -> predicted bytes``: the cache the report's
    capacity table reads, so its figures are predictions, never extrapolations.
    Series run in parallel over the CPU's cores.
    """
    templates = [points[0] for points in series(scenario)]
    jobs = [(scenario, t, tuple(budgets_gib), start, limit) for t in templates]
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2:
        results = [_series_capacity(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            results = list(pool.map(_series_capacity, jobs))
    return {key: value for part in results for key, value in part.items()}


def _series_capacity(job) -> dict[str, int]:
    scenario, template, budgets_gib, start, limit = job
    lengths = [start << i for i in range(64) if start << i <= limit]
    known: dict[int, int | None] = {}

    def peak(n: int) -> int | None:
        if n not in known:
            point = Point(template.variant, template.mode, template.scope, shape_at(scenario, n), template.forward_only)
            known[n] = None if shape_problem(point) else predict(point, count_flops=False).peak_bytes
        return known[n]

    for gib in budgets_gib:
        lo, hi = -1, len(lengths)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            value = peak(lengths[mid])
            # a length the variant cannot run at (e.g. LSH below 2 buckets) counts as fitting
            # when shorter than lengths that do: memory only grows with n
            lo, hi = (mid, hi) if value is None or value <= gib * 2**30 else (lo, mid)
        for i in (lo, hi):
            if 0 <= i < len(lengths):
                peak(lengths[i])
    out = {}
    for n, value in known.items():
        if value is not None:
            point = Point(template.variant, template.mode, template.scope, shape_at(scenario, n), template.forward_only)
            out[point.key_text()] = value
    return out
