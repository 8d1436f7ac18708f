"""The one judge of a change between two runs, used by ``attnprof gate`` and by the
report's comparison with a baseline run, so the two can never disagree.

Memory: a figure regresses when it grew by more than the tolerance, the larger of a
relative margin (percent of the baseline figure) and an absolute floor in bytes; it
improved when it shrank by more than the same margin. Status: ok -> anything else is a
regression. Time is never a regression (shared CI machines are too noisy to gate on):
beyond ``TIME_CHANGE_PCT`` it is only "slower" or "faster".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.units import fmt_bytes

# The figures compared are exact, so the floor is small: it only absorbs alignment-sized
# wobbles, while 10% of the smallest `ci` point (1.5 MiB) is still caught.
DEFAULT_TOLERANCE_PCT = 2.0
DEFAULT_ABS_TOLERANCE = 64 << 10  # bytes
# Timings are medians of a few repeats; below 10% they are mostly noise (torch.utils.benchmark).
TIME_CHANGE_PCT = 10.0


@dataclass(frozen=True)
class Tolerance:
    """How much a memory figure may grow before it is a regression."""

    pct: float = DEFAULT_TOLERANCE_PCT  # percent of the baseline figure
    abs_bytes: int = DEFAULT_ABS_TOLERANCE  # floor: growth up to this many bytes always passes

    def __post_init__(self):
        for name, value in (("tolerance", self.pct), ("absolute tolerance", self.abs_bytes)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise GateError(f"{name} must be a finite number >= 0, got {value!r}")

    def margin(self, baseline: int) -> int:
        """Whole bytes a figure of ``baseline`` bytes may grow (or shrink) and still be 'ok':
        exact (rational arithmetic, then the floor: a byte count grows by whole bytes, so the
        verdict is the same), never a float that rounds a 2**62-byte baseline's margin to 64 B."""
        share = Fraction(abs(baseline)) * Fraction(self.pct) / 100
        return max(math.floor(share), math.floor(self.abs_bytes))

    def describe(self) -> str:
        return f"{self.pct:g}% or {fmt_bytes(self.abs_bytes)}, whichever is larger"


def memory_verdict(baseline: float, current: float, tolerance: Tolerance) -> str:
    """'regression', 'improved' or 'ok' for one byte figure present on both sides."""
    margin = tolerance.margin(baseline)
    if current > baseline + margin:
        return "regression"
    if current < baseline - margin:
        return "improved"
    return "ok"


def status_verdict(baseline: str, current: str) -> str:
    """'ok' (unchanged), 'regression' (was ok), 'improved' (is ok now) or 'changed'."""
    if baseline == current:
        return "ok"
    if baseline == "ok":
        return "regression"
    return "improved" if current == "ok" else "changed"


def change_pct(baseline, current) -> Optional[float]:
    """(current - baseline) / baseline in percent; None where either is missing or baseline is 0."""
    if baseline is None or current is None or not baseline:
        return None
    return (current - baseline) / baseline * 100.0


def time_verdict(baseline_ms, current_ms, threshold_pct: float = TIME_CHANGE_PCT) -> Optional[str]:
    """'slower', 'faster' or 'same'; None where either time is missing. Never a regression."""
    change = change_pct(baseline_ms, current_ms)
    if change is None or math.isnan(change):
        return None
    return "slower" if change > threshold_pct else "faster" if change < -threshold_pct else "same"
