"""How far the time model's predicted step time is from the measured one (issue #15).

Pure: plain numbers in, plain numbers out; no pandas, matplotlib or torch, so the report
(``reports/render.py``) and ``scripts/bench_time_model.py`` score a run the same way.

The error of one point is ``ln(predicted / measured)`` of its forward + backward time
(``records.step_time_ms``). Its size ``|ln r|`` prints as a factor ``exp|ln r|`` (1.32×
means off by 32 % either way); its sign says whether the model predicts too slow
(ratio > 1) or too fast (< 1). Points measured under ``MIN_MEASURED_MS`` are shown but
not scored: there Python dispatch per op and timer noise, which the model does not try
to capture, dominate the step (docs/time-model.md).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from attnprof.profiler.records import step_time_ms

GOAL_MEDIAN_FACTOR = 1.5  # issue #15: median |error| at most 1.5x ...
GOAL_P90_FACTOR = 2.5  # ... and 90th percentile at most 2.5x
MIN_MEASURED_MS = 50.0  # scored points: measured fwd+bwd at least this long (see the module docstring)

# Which prediction to compare with the measured medians (time_fwd_ms, time_bwd_ms):
# the model with this machine's calibrated rates, or the model for a named GPU (--gpu),
# which is only comparable when the run measured on that GPU.
SOURCES = {
    "calibrated": ("predicted_time_fwd_ms", "predicted_time_bwd_ms"),
    "gpu": ("gpu_time_fwd_ms", "gpu_time_bwd_ms"),
}


@dataclass(frozen=True)
class Pair:
    """One ok point with both a measured and a predicted step time."""

    label: str  # the variant (or the report's series label)
    mode: str
    seq_len: int
    measured_ms: float  # median forward + backward
    predicted_ms: float

    @property
    def log_ratio(self) -> float:
        """ln(predicted / measured): > 0 the model predicts too slow, < 0 too fast."""
        return math.log(self.predicted_ms / self.measured_ms)


@dataclass(frozen=True)
class Accuracy:
    """The error distribution over the scored pairs."""

    count: int  # pairs measured at or above the threshold (scored)
    short: int  # pairs measured below it (shown, not scored)
    median_factor: Optional[float]  # exp(median |ln r|); None with no scored pair
    p90_factor: Optional[float]  # exp(90th percentile of |ln r|)

    @property
    def meets_goals(self) -> bool:
        return (self.count > 0 and self.median_factor <= GOAL_MEDIAN_FACTOR
                and self.p90_factor <= GOAL_P90_FACTOR)


@dataclass(frozen=True)
class GroupError:
    """The scored pairs of one variant (or variant x mode)."""

    key: tuple
    count: int
    median_ratio: float  # exp(median ln r): predicted / measured of the typical point
    median_factor: float  # exp(median |ln r|)
    worst_ratio: float  # the ratio furthest from 1


def _positive(value) -> Optional[float]:
    """A finite number > 0, else None (None, NaN, inf, bool, text, 0 all mean 'none')."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def pair_of(record: Mapping, source: str = "calibrated", label_field: str = "variant") -> Optional[Pair]:
    """The measured and predicted step time of an ok record, or None when it lacks either.

    A forward-only measurement (no backward median) is compared with the predicted forward
    alone; a measured backward with no predicted one is no prediction, not a 0 ms one.
    """
    if record.get("status") != "ok":
        return None
    fwd_name, bwd_name = SOURCES[source]
    fwd, bwd = _positive(record.get("time_fwd_ms")), _positive(record.get("time_bwd_ms"))
    pred_fwd, pred_bwd = _positive(record.get(fwd_name)), _positive(record.get(bwd_name))
    if fwd is None or pred_fwd is None or (bwd is not None and pred_bwd is None):
        return None
    predicted = step_time_ms(pred_fwd, pred_bwd if bwd is not None else None)
    seq_len = record.get("seq_len")
    return Pair(str(record.get(label_field, record.get("variant"))), str(record.get("mode", "")),
                int(seq_len) if isinstance(seq_len, numbers.Integral) else 0, step_time_ms(fwd, bwd), predicted)


def pairs(records: Iterable[Mapping], source: str = "calibrated", label_field: str = "variant") -> list[Pair]:
    """Every ok record that has both times, as a Pair."""
    found = (pair_of(r, source, label_field) for r in records)
    return [p for p in found if p is not None]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile, interpolating linearly between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def scored(found: Iterable[Pair], min_measured_ms: float = MIN_MEASURED_MS) -> list[Pair]:
    return [p for p in found if p.measured_ms >= min_measured_ms]


def accuracy(found: list[Pair], min_measured_ms: float = MIN_MEASURED_MS) -> Accuracy:
    """Median and 90th percentile of |ln(predicted / measured)| over the scored pairs."""
    kept = scored(found, min_measured_ms)
    if not kept:
        return Accuracy(0, len(found), None, None)
    sizes = [abs(p.log_ratio) for p in kept]
    return Accuracy(len(kept), len(found) - len(kept), math.exp(quantile(sizes, 0.5)), math.exp(quantile(sizes, 0.9)))


def by_group(found: list[Pair], key: Callable[[Pair], tuple] = lambda p: (p.label,),
             min_measured_ms: float = MIN_MEASURED_MS) -> list[GroupError]:
    """Per group of scored pairs: the median signed error, worst group (furthest off) first."""
    groups: dict[tuple, list[Pair]] = {}
    for p in scored(found, min_measured_ms):
        groups.setdefault(key(p), []).append(p)
    out = []
    for k, members in groups.items():
        logs = [p.log_ratio for p in members]
        worst = max(logs, key=abs)
        out.append(GroupError(k, len(members), math.exp(quantile(logs, 0.5)),
                              math.exp(quantile([abs(x) for x in logs], 0.5)), math.exp(worst)))
    return sorted(out, key=lambda g: (-abs(math.log(g.median_ratio)), g.key))


def fmt_factor(value: Optional[float]) -> str:
    """1.3247 -> '1.32×'; None -> '-'."""
    return "-" if value is None else f"{value:.2f}×"


def fmt_ratio(ratio: float) -> str:
    """A signed error in words: 0.5 -> '2.00× too fast', 1.5 -> '1.50× too slow'."""
    if abs(math.log(ratio)) < 0.005:
        return "on target"
    return f"{fmt_factor(ratio)} too slow" if ratio > 1 else f"{fmt_factor(1 / ratio)} too fast"


def summary_line(acc: Accuracy, min_measured_ms: float = MIN_MEASURED_MS) -> str:
    """One sentence: count, median and p90 against the goals, met or not."""
    floor = f"measured fwd+bwd ≥ {min_measured_ms:g} ms"
    if acc.count == 0:
        return (f"No scored point: none of the {acc.short} point(s) with a prediction has {floor}, "
                f"so the goals (median ≤ {GOAL_MEDIAN_FACTOR:g}×, p90 ≤ {GOAL_P90_FACTOR:g}×) are not judged.")
    verdict = "goals met" if acc.meets_goals else "goals MISSED"
    return (f"{acc.count} point(s) with {floor}: median {fmt_factor(acc.median_factor)} "
            f"(goal ≤ {GOAL_MEDIAN_FACTOR:g}×), p90 {fmt_factor(acc.p90_factor)} (goal ≤ {GOAL_P90_FACTOR:g}×): "
            f"{verdict}; {acc.short} shorter point(s) not scored.")
