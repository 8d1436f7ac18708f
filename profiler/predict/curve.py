"""The capacity curve: predicted bytes of one series against length, the longest power of
two that fits a budget (``Curve.fit``; a ``Fit`` says whether its deciding lengths were
all predicted or extrapolated), the lengths that decide it, and the search that predicts
those within a time budget, round-robin over curves (``search_curves``). The report's
"what fits where" table and chart read these (reports/capacity.py keeps the presentation);
``capacity_within`` predicts a scenario's deciding lengths ahead of a render, on the
worker pool, within a deadline (the sweep's capacity phase, api.capacity_for_report).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from attnprof.profiler.records import Point

MIN_EXP, MAX_EXP = 4, 20  # lengths searched: 16 .. 1M tokens
FIRST_CALL_S = 4.0  # a cold process's first predict(): mostly importing torch._dynamo


@dataclass
class Fit:
    length: int  # longest fitting power of two; 0: not even 2**MIN_EXP fits
    verified: bool  # the boundary's lengths were all predicted, none extrapolated
    at_cap: bool  # fits even at 2**MAX_EXP: the longest is at least that


@dataclass
class Curve:
    """Predicted peak bytes of one series × panel against length."""

    series: str
    panel: str
    make_point: Callable[[int], Point]
    exponent: Optional[float] = None  # the variant's memory exponent (complexity[0]), if known
    known: dict = field(default_factory=dict)  # length -> predicted bytes
    problem: str = ""  # why predict() stopped being called for this curve
    gpu: str = ""  # a GPU key: known holds the GPU model's total there, not the tensor peak
    offset: float = 0.0  # a constant part of every value (the CUDA context): extrapolated without it
    figures: dict = field(default_factory=dict)  # GPU curves: length -> the model's gpu_* fields

    def estimate(self, n: int) -> Optional[float]:
        """Known; else, beyond the largest known length, ``a*n + b*n**e`` through the two
        largest (linear stack terms plus the variant's own exponent e); else log-log
        interpolation (or extrapolation) between the nearest two known lengths. A
        constant ``offset`` is taken out first and added back."""
        if n in self.known:
            return self.known[n]
        if self.offset:
            inner = Curve(self.series, self.panel, self.make_point, self.exponent,
                          {k: max(1.0, v - self.offset) for k, v in self.known.items()})
            value = inner.estimate(n)
            return None if value is None else value + self.offset
        ks = sorted(self.known)
        if not ks:
            return None
        if len(ks) == 1:
            return self.known[ks[0]] * n / ks[0]  # one point: assume linear
        if n > ks[-1] and (two_term := self._two_term(ks[-2], ks[-1])):
            a, b, e = two_term
            return a * n + b * n ** e
        lo, hi = (ks[0], ks[1]) if n < ks[0] else (ks[-2], ks[-1]) if n > ks[-1] else _around(ks, n)
        slope = max(0.0, math.log(self.known[hi] / self.known[lo]) / math.log(hi / lo))
        return self.known[hi] * (n / hi) ** slope

    def _two_term(self, n1: int, n2: int) -> Optional[tuple]:
        e = self.exponent
        if e is None or e <= 1.0 + 1e-6:
            return None
        p1, p2 = self.known[n1], self.known[n2]
        det = n1 * n2 ** e - n2 * n1 ** e  # solve p = a*n + b*n**e at n1 and n2
        a, b = (p1 * n2 ** e - p2 * n1 ** e) / det, (n1 * p2 - n2 * p1) / det
        return (a, b, e) if a >= 0 and b >= 0 else None

    def fit(self, budget_bytes: float) -> Optional[Fit]:
        if not self.known:
            return None
        longest = 0
        for e in range(MIN_EXP, MAX_EXP + 1):
            if self.estimate(1 << e) > budget_bytes:
                break
            longest = 1 << e
        return Fit(longest, not self.deciding(longest), longest == 1 << MAX_EXP)

    def deciding_for(self, budget_bytes: float) -> list[int]:
        fit = self.fit(budget_bytes)
        return self.deciding(fit.length) if fit else []

    def deciding(self, longest: int) -> list[int]:
        """Lengths not yet predicted that decide ``longest``: it, and the next one up."""
        nxt = (longest * 2 if longest else 1 << MIN_EXP) if longest < 1 << MAX_EXP else 0
        return [n for n in (longest, nxt) if n and n not in self.known]


def search_curves(curves: list, limits: Callable[[Curve], list], first: int, seconds: float, warm: bool,
            predict_at: Callable[[Curve, int], int]) -> int:
    """Round-robin over the curves, each predicting its shortest undecided length (short
    ones are cheap), until every boundary is decided or ``seconds`` would be overrun;
    returns the predictions made."""
    start, calls, last_s = time.monotonic(), 0, 0.0 if warm else FIRST_CALL_S
    open_curves = list(curves)
    while open_curves:
        still = []
        for curve in open_curves:
            if time.monotonic() - start + last_s > seconds:  # the next call would likely overrun
                still = []
                break
            need = sorted({n for b in limits(curve) for n in curve.deciding_for(b)})
            if not curve.known:
                need = [first]
            if need and not curve.problem:
                began = time.monotonic()
                if predict_at(curve, need[0]):
                    calls, last_s = calls + 1, time.monotonic() - began
                still.append(curve)
        open_curves = still
    return calls


def gpu_value(fields: dict, memory_bytes: int) -> float:
    """What must fit the GPU: the modelled total; above its memory whenever the simulated
    allocator runs out (it then holds what the point would need)."""
    total = float(fields["gpu_total_bytes"])
    return total if fields.get("gpu_fits") else max(total, memory_bytes + 1.0)


def _around(ks: list[int], n: int) -> tuple[int, int]:
    """The known lengths just below and just above n (ks sorted, ks[0] < n < ks[-1])."""
    hi = next(k for k in ks if k > n)
    return max(k for k in ks if k < n), hi


def capacity_within(sc, budgets_gib: tuple, seconds: float, gpus: Optional[list] = None) -> dict:
    """``points.capacity_predictions`` (or, with ``gpus``, ``gpu_points.gpu_capacity_predictions``)
    one series per task on the worker pool (``pool.within``), keeping what finishes within
    ``seconds``: point key -> bytes (or (GPU key, point key) -> gpu_* fields). Built-in variants
    only, as the report predicts (reports/builtins.py): ``within`` may run its tasks in this
    process (a multi-threaded CUDA build), where a plug-in that crashes would take the sweep
    and its report with it; a plug-in's series keep their measured points."""
    from attnprof.profiler.predict.pool import within
    from attnprof.scenarios.plan import series
    from attnprof.scenarios.variants.catalog import is_builtin_label

    if gpus:
        from attnprof.profiler.predict.gpu_points import gpu_capacity_predictions

        task, extra = gpu_capacity_predictions, (gpus,)
    else:
        from attnprof.profiler.predict.points import capacity_predictions

        task, extra = capacity_predictions, (budgets_gib,)
    parts = [sc.override(variants=(points[0].variant,), modes=(points[0].mode,)) for points in series(sc)
             if is_builtin_label(points[0].variant)]
    entries: dict = {}
    for part in within(task, [(part, *extra) for part in parts], seconds):
        entries.update(part)
    return entries
