"""`attnprof predict`: predicted peak bytes and FLOPs for a scenario's points, and the
longest length that fits a memory budget (at power-of-two or finer resolution; the one
search: search.py), and the report's capacity figures at the lengths that decide.

Predictions run in this process when there are few of them; many run in this process
and in workers forked from it once it is warm (torch and the fake-tensor machinery
imported), each taking the next point not yet taken, so no worker pays the warm-up; a
budget search schedules each of its predictions so (pool.py).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler.forks import usable_cores
from attnprof.profiler.measure.workload import kv_repeat, scope_note
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.predict import peak_split
from attnprof.profiler.predict.pool import run_chains, spread
from attnprof.profiler.predict.search import bracket, longest_index
from attnprof.scenarios.plan import series, shape_at, shape_problem
from attnprof.profiler.records import Point
from attnprof.profiler.failure_text import failure_reason
from attnprof.profiler.units import fmt_bytes, fmt_flops, printable
from attnprof.scenarios.scenario import Scenario

LONGEST_SEARCHED = 1 << 20  # budget search stops at 1M tokens unless --max-len says otherwise
SCAN = 4096  # how far (in steps of the resolution) to look for a length a variant accepts


def prediction_record(point: Point, rates=None) -> dict:
    """One point's prediction; with ``rates`` (profiler/timemodel Rates: this machine's
    calibration) also its predicted step time, ``predicted_time_fwd_ms`` / ``_bwd_ms``."""
    from attnprof.profiler.timemodel.fields import time_fields

    record = {**point.identity(), "status": "ok", "reason": ""}
    problem = shape_problem(point)
    if problem:
        return {**record, "status": "skipped", "reason": problem, "predicted_peak_bytes": None, "flops": None}
    record["reason"] = scope_note(point)
    record["kv_repeat"] = kv_repeat(point)  # issue 24
    try:
        acc = predict(point)
    except UserError:
        raise
    except Exception as exc:  # a plug-in's bug, or attnprof's: this point says so, the others are still predicted
        return {**record, "status": "error", "reason": failure_reason(exc), "predicted_peak_bytes": None,
                "flops": None}
    return {**record, "predicted_peak_bytes": acc.peak_bytes, "predicted_breakdown_bytes": acc.breakdown_bytes,
            "largest_at_peak": acc.largest_at_peak,
            "predicted_peak_op": acc.peak_op, "predicted_peak_pass": acc.peak_pass,  # issue 24: peak split
            "flops_fwd": acc.flops_fwd, "flops_bwd": acc.flops_bwd, "flops": acc.flops_fwd + acc.flops_bwd,
            **time_fields(point, acc.op_costs, rates),
            "prediction_method": acc.method, "prediction_cached": acc.cached, "predict_ms": round(acc.wall_ms, 1)}


def point_key(point: Point) -> tuple:
    """What a fake-tensor dispatch cache shares between points: the variant at a length."""
    return point.variant, point.shape.seq_len


def predict_points(scenario: Scenario) -> list[dict]:
    """Every point's prediction (``spread`` over the cores when there are many)."""
    return spread(prediction_record, [p for s in series(scenario) for p in s], warm_key=point_key)


def longest_fitting(scenario: Scenario, budget_bytes: int, start: int = 256, limit: int | None = None,
                    resolution: int | None = None) -> list[dict]:
    """Per variant x mode: the longest length whose predicted peak fits ``budget_bytes``.

    Lengths are powers of two from ``start`` to ``limit`` (default 1M tokens); with a
    ``resolution``, multiples of it: a search over the powers of two (bisection, each
    step placed where the peaks predicted so far say the budget is crossed: ``_guess``)
    brackets the answer, a bisection over the multiples of ``resolution`` inside the
    bracket finds it.
    Both visit only lengths the variant accepts (LSH needs n divisible by 2 x bucket_size,
    sparse by its stride), and every figure is a prediction, never an extrapolation.
    The search assumes the peak grows with n, which holds for these variants; each row
    says whether the lengths it predicted bear that out (``monotone``) and, if not, where.
    Each series is a chain of predictions (``run_chains``): every prediction goes to
    whichever core is free, the longest lengths first (in a variant whose fake run loops
    over blocks of the sequence they take longest), a length a core has just run for the
    same variant before any other (its fake-tensor cache holds that length's ops).
    """
    if resolution is not None and resolution <= 0:
        raise ValueError(f"resolution must be a positive number of tokens, got {resolution}")
    limit = limit or LONGEST_SEARCHED
    templates = [points[0] for points in series(scenario.override(seq_lens=(start,)))]
    chains = [_longest_in_series(scenario, t, budget_bytes, start, limit, resolution) for t in templates]
    # two series are already several predictions each: worth a worker
    return run_chains(prediction_record, chains, workers=usable_cores() if len(chains) >= 2 else 1,
                      rank=lambda point: point.shape.seq_len, warm_key=point_key)


class Series:
    """One variant x mode at any length: its predictions, made once each."""

    def __init__(self, scenario: Scenario, template: Point):
        self.scenario, self.template = scenario, template
        self.records: dict[int, dict] = {}
        self._accepts: dict[int, bool] = {}

    def point(self, n: int) -> Point:
        t = self.template
        return replace(t, shape=shape_at(self.scenario, n))  # the template's parsed variant carries over

    def accepts(self, n: int) -> bool:
        if n not in self._accepts:
            self._accepts[n] = shape_problem(self.point(n)) is None
        return self._accepts[n]

    def at(self, n: int):
        """The record at n: ``record = yield from series.at(n)`` in a chain, which yields the
        point to predict the first time n is asked for (``run_chains``)."""
        if n not in self.records:
            self.records[n] = yield self.point(n)
        return self.records[n]

    def fits(self, n: int, budget: int):
        """``yield from``: whether the prediction at n fits the budget."""
        record = yield from self.at(n)
        return record["status"] == "ok" and record["predicted_peak_bytes"] <= budget

    def accepted_near(self, n: int, lo: int, hi: int, step: int) -> Optional[int]:
        """The accepted multiple of ``step`` nearest n, strictly between lo and hi."""
        base = n - n % step
        for k in range(SCAN):
            for m in (base - k * step, base + (k + 1) * step):
                if lo < m < hi and m > 0 and self.accepts(m):
                    return m
            if base - k * step <= lo and base + (k + 1) * step >= hi:
                return None
        return None

    def monotone(self) -> tuple[bool, str]:
        """Whether the peaks predicted so far grow with n; if not, the first pair that does not."""
        known = sorted((n, r["predicted_peak_bytes"]) for n, r in self.records.items() if r["status"] == "ok")
        for (n1, p1), (n2, p2) in zip(known, known[1:]):
            if p2 < p1:
                return False, (f"predicted peak is not monotone in n: {fmt_bytes(p1)} at {n1} tokens but "
                               f"{fmt_bytes(p2)} at {n2}; the search assumed it is")
        return True, ""


def _longest_in_series(scenario: Scenario, template: Point, budget: int, start: int, limit: int,
                       resolution: Optional[int]):
    """One series' search, a chain: yields each point to predict, returns the row."""
    s = Series(scenario, template)
    powers = [start << i for i in range(64) if start << i <= limit]
    # A variant may refuse some lengths (LSH needs two buckets): the search visits only those
    # it accepts, or a refusal would read as "does not fit".
    lengths = [n for n in powers if s.accepts(n)] or powers
    # lengths[lo] fits (or none), lengths[hi] does not (or beyond)
    lo, hi = yield from bracket(-1, len(lengths), lambda lo, hi: _guess(s, lengths, lo, hi, budget) if hi - lo > 1
                                else None, lambda i: s.fits(lengths[i], budget))
    best = lengths[lo] if lo >= 0 else None
    above = lengths[hi] if hi < len(lengths) else None  # the shortest that does not fit, if any
    if resolution is not None:
        best, above = yield from _finer(s, budget, best, above, limit, resolution)
    monotone, note = s.monotone()
    if above is None:
        reason = f"search stopped at the limit of {limit} tokens"
    else:
        record = yield from s.at(above)
        if record["status"] != "ok":
            reason = record["reason"]
        else:
            reason = f"{above} tokens would need {fmt_bytes(record['predicted_peak_bytes'])}"
    row = dict((yield from s.at(best))) if best else {**template.identity(), "seq_len": None,
                                                      "predicted_peak_bytes": None}
    failed = [r["reason"] for r in s.records.values() if r["status"] == "error"]
    if failed:  # a length the search read as "does not fit" was in fact not predicted
        row.update(status="error", reason=failed[0])
        reason = f"prediction failed: {failed[0]}"
    return {**row, "budget_bytes": budget, "longest_fitting_seq_len": best, "limited_by": reason,
            "resolution": resolution, "monotone": monotone, "monotone_note": note,
            "lengths_predicted": len(s.records)}


def _guess(s: Series, lengths: list, lo: int, hi: int, budget: int) -> int:
    """The next index to predict, strictly between lo and hi: where the peaks predicted so
    far, a power law in n between neighbours (log-log), say the budget is crossed; the
    middle when nothing is known. It only orders the predictions (every figure is
    predicted), so it saves predictions when right and costs none of the answer's
    exactness when wrong: the bracket (lo fits, hi does not) stays a binary search's.

    The power law is fitted to the part of the peak that grows with n: the parameters and
    their gradients (the same at every length) come off first, so one prediction and the
    variant's exponent already place the next one near the crossing."""
    ok = {n: r for n, r in s.records.items() if r["status"] == "ok" and r["predicted_peak_bytes"] and n in lengths}
    if not ok:
        return (lo + hi) // 2
    fixed = min(_fixed_bytes(r) for r in ok.values())
    if budget <= fixed or any(r["predicted_peak_bytes"] <= fixed for r in ok.values()):
        fixed = 0
    known = sorted((math.log(n), math.log(r["predicted_peak_bytes"] - fixed)) for n, r in ok.items())
    target = math.log(budget - fixed)
    below = [k for k in known if k[1] <= target]
    above = [k for k in known if k[1] > target]
    if below and above:
        (x0, y0), (x1, y1) = below[-1], above[0]
    elif len(known) >= 2:  # one side only: the slope of the two nearest the budget
        (x0, y0), (x1, y1) = (known[-2], known[-1]) if below else (known[0], known[1])
    else:  # one prediction: the variant's own exponent (memory ~ n^e), at least linear
        e = max(1.0, float(getattr(s.template.spec.cls, "complexity", (1.0,))[0]))
        (x0, y0), (x1, y1) = known[0], (known[0][0] + 1.0, known[0][1] + (e if above else 1.0))
    slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
    if slope <= 0:
        return (lo + hi) // 2
    crossing = math.exp(x0 + (target - y0) / slope)
    index = max((i for i, n in enumerate(lengths) if n <= crossing), default=lo)
    return min(max(index, lo + 1), hi - 1)


def _fixed_bytes(record: dict) -> int:
    """The bytes of a prediction that do not grow with n: parameters and gradients, and (issue 24)
    the parameters' autocast copies, an optimizer's states and its step temporaries."""
    breakdown = record.get("predicted_breakdown_bytes") or {}
    return sum(breakdown.get(c, 0) for c in ("parameters", "gradients", "autocast_copies", "optimizer_state",
                                             "optimizer_temporaries"))


def _finer(s: Series, budget: int, best: Optional[int], above: Optional[int], limit: int, step: int):
    """``yield from``: within the power-of-two bracket (best fits, above does not), the
    longest accepted multiple of ``step`` that fits, and the next accepted multiple above it."""
    top = above if above is not None else limit + 1
    lo = s.accepted_near(best, 0, best + 1, step) if best else None  # the longest multiple <= best
    lo_n = lo or 0
    lo_n, hi = yield from bracket(lo_n, top, lambda lo, hi: s.accepted_near((lo + hi) // 2, lo, hi, step),
                                  lambda n: s.fits(n, budget))
    if lo_n and not (yield from s.fits(lo_n, budget)):  # the multiple below a fitting power did not fit: not monotone
        lo_n = 0
    return (lo_n or None), (hi if hi <= limit else None)


# --- issue 24: precision ---
def _with_copies(rows: list[dict], lines: list) -> list:
    """``lines`` (head, then one per row) with an "autocast copies" column after "grads" when
    any row's breakdown has some (the low-precision parameter copies autocast made); as is otherwise."""
    copies = [(r.get("predicted_breakdown_bytes") or {}).get("autocast_copies") for r in rows]
    if not any(copies):
        return lines
    at = lines[0].index("grads") + 1
    cells = ["autocast copies"] + [fmt_bytes(c) if r["status"] == "ok" else "-" for r, c in zip(rows, copies)]
    return [row[:at] + [cell] + row[at:] for row, cell in zip(lines, cells)]
_OPTIMIZER_COLUMNS = {"optimizer_state": "opt_state", "optimizer_temporaries": "opt_temps"}  # category -> column


# --- issue 24: peak split ---
def peak_op_text(record: dict) -> str:
    """The op holding a record's predicted peak and its pass, as one cell (peak_split.py)."""
    return peak_split.peak_op_text(record.get("predicted_peak_op"), record.get("predicted_peak_pass"))


def _with_peak_split(rows: list[dict], lines: list) -> list:
    """``lines`` with an "lm head/loss" column after "temporaries" where any row's breakdown has
    the LM head's and loss's bytes, and a last "peak op" column (the op holding the peak, its pass)."""
    out = [row[:] for row in lines]
    if any((r.get("predicted_breakdown_bytes") or {}).get("lm_head_loss") for r in rows):
        at = out[0].index("temporaries") + 1
        cells = ["lm head/loss"] + [fmt_bytes((r.get("predicted_breakdown_bytes") or {}).get("lm_head_loss", 0))
                                    if r["status"] == "ok" else "-" for r in rows]
        out = [row[:at] + [cell] + row[at:] for row, cell in zip(out, cells)]
    head, body = out[0], out[1:]
    width = len(head)
    head = head + ["peak op"]
    body = [row[:width] + [peak_op_text(r) if r["status"] == "ok" else "-"] + row[width:]
            for row, r in zip(body, rows)]
    return [head, *body]


def format_table(rows: list[dict], budget_bytes: int | None = None) -> str:
    """A plain-text table: one line per record."""
    head = ["variant", "mode", "seq_len", "batch", "peak", "params", "grads", "activations", "temporaries", "FLOPs"]
    if budget_bytes is not None:
        head = ["variant", "mode", "longest_fit", "peak_there", "limited_by"]
    # --- issue 24: optimizer --- (its columns only where a row has an optimizer)
    optimizer = budget_bytes is None and any(set(r.get("predicted_breakdown_bytes") or {}) & set(_OPTIMIZER_COLUMNS)
                                             for r in rows)
    if optimizer:
        head = head[:-1] + list(_OPTIMIZER_COLUMNS.values()) + head[-1:]
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
        extra = [fmt_bytes(br.get(c, 0)) for c in _OPTIMIZER_COLUMNS] if optimizer else []
        lines.append([r["variant"], r["mode"], str(r["seq_len"]), str(r["batch"]), fmt_bytes(r["predicted_peak_bytes"]),
                      fmt_bytes(br["parameters"] + br["inputs"]), fmt_bytes(br["gradients"]),
                      fmt_bytes(br["activations"]), fmt_bytes(br["temporaries"]), *extra, fmt_flops(r["flops"])])
    if budget_bytes is None:  # --- issue 24: precision --- the parameters' autocast copies, where there are any
        lines = _with_copies(rows, lines)
        lines = _with_peak_split(rows, lines)  # --- issue 24: peak split ---
    lines = [[printable(cell) for cell in row] for row in lines]  # labels and reasons: one line each
    widths = [max(len(row[i]) for row in lines if i < len(row)) for i in range(len(lines[0]))]  # every column
    text = ["  ".join(cell.ljust(widths[i]) if i < len(widths) else cell for i, cell in enumerate(row)).rstrip()
            for row in lines]
    title = "predicted peak (fake tensors, exact tensor accounting); params column includes inputs"
    if budget_bytes is None and len(rows) == 1 and rows[0].get("largest_at_peak"):
        text.append("largest tensors live at the peak:")
        text += [f"  {fmt_bytes(t['bytes']):>11}  {t['category']:<11} {t['op']} {t['dtype']} {t['shape']}"
                 for t in rows[0]["largest_at_peak"]]
    # how a point was measured, where that needs saying (interleaved layer kinds at scope attention)
    notes = dict.fromkeys((r["variant"], r["reason"]) for r in rows if r.get("status") == "ok" and r.get("reason"))
    text += [f"note: {variant}: {note}" for variant, note in notes]
    if budget_bytes is not None:
        steps = {r.get("resolution") for r in rows}
        step = steps.pop() if len(steps) == 1 else None
        what = f"longest length (a multiple of {step} tokens)" if step else "longest power-of-two length"
        title = f"{what} whose predicted peak fits in {fmt_bytes(budget_bytes)}"
        text += [f"note: {r['variant']} {r['mode']}: {r['monotone_note']}" for r in rows if r.get("monotone_note")]
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
    results = spread(_series_capacity, [(scenario, t, tuple(budgets_gib), start, limit) for t in templates])
    return {key: value for part in results for key, value in part.items()}


def _series_capacity(job) -> dict[str, int]:
    scenario, template, budgets_gib, start, limit = job
    lengths = [start << i for i in range(64) if start << i <= limit]
    known: dict[int, int | None] = {}

    def peak(n: int) -> int | None:
        if n not in known:
            point = replace(template, shape=shape_at(scenario, n))
            known[n] = None if shape_problem(point) else predict(point, count_flops=False).peak_bytes
        return known[n]

    for gib in budgets_gib:
        # a length the variant cannot run at (e.g. LSH below 2 buckets) counts as fitting
        # when shorter than lengths that do: memory only grows with n
        lo, hi = longest_index(len(lengths), lambda i: (value := peak(lengths[i])) is None or value <= gib * 2**30)
        for i in (lo, hi):
            if 0 <= i < len(lengths):
                peak(lengths[i])
    out = {}
    for n, value in known.items():
        if value is not None:
            point = replace(template, shape=shape_at(scenario, n))
            out[point.key_text()] = value
    return out
