"""The one judge of a change (profiler/gate/verdict.py): memory regresses past the larger
of a relative margin and an absolute floor, a status that was ok and is not is a
regression, and time is only ever slower, faster or the same."""

from __future__ import annotations

import math

import pytest

from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.verdict import (DEFAULT_ABS_TOLERANCE, Tolerance, change_pct, memory_verdict,
                                            status_verdict, time_verdict)

MIB = 1 << 20


def test_the_margin_is_the_larger_of_the_percentage_and_the_floor():
    tol = Tolerance(pct=2.0, abs_bytes=64 << 10)
    assert tol.margin(100 * MIB) == 2 * MIB  # 2% of 100 MiB beats 64 KiB
    assert tol.margin(1 * MIB) == DEFAULT_ABS_TOLERANCE  # 2% of 1 MiB is under the floor
    assert tol.describe() == "2% or 64.00 KiB, whichever is larger"


def test_the_margin_is_whole_bytes_exact_at_any_size():
    """--json-out's margin_bytes is a byte count: an int, exact where a float rounds (2% of
    2**62 + 50 bytes is 92233720368547759.0 in floats, 92233720368547759 exactly)."""
    tol = Tolerance(pct=2.0, abs_bytes=0)
    assert tol.margin(2**62 + 50) == (2**62 + 50) * 2 // 100 and isinstance(tol.margin(2**62 + 50), int)
    assert tol.margin(101) == 2 and Tolerance(pct=0.0, abs_bytes=64.9).margin(10) == 64


@pytest.mark.parametrize("current, verdict", [(100 * MIB + 2 * MIB, "ok"), (100 * MIB + 2 * MIB + 1, "regression"),
                                              (100 * MIB - 2 * MIB, "ok"), (100 * MIB - 2 * MIB - 1, "improved")])
def test_memory_beyond_the_margin_either_way_is_a_verdict(current, verdict):
    assert memory_verdict(100 * MIB, current, Tolerance(pct=2.0, abs_bytes=0)) == verdict


@pytest.mark.parametrize("kwargs", [dict(pct=-1.0), dict(pct=math.inf), dict(pct=math.nan), dict(abs_bytes=-1),
                                    dict(pct=True), dict(abs_bytes="64K")])
def test_a_tolerance_is_a_finite_number_at_least_zero(kwargs):
    with pytest.raises(GateError, match="must be a finite number >= 0"):
        Tolerance(**kwargs)


def test_a_status_that_was_ok_and_is_not_is_a_regression():
    assert status_verdict("ok", "ok") == "ok" and status_verdict("oom", "oom") == "ok"
    assert status_verdict("ok", "oom") == "regression"
    assert status_verdict("timeout", "ok") == "improved"
    assert status_verdict("oom", "crashed") == "changed"


def test_time_is_never_a_regression_only_slower_faster_or_the_same():
    assert time_verdict(100.0, 111.0) == "slower" and time_verdict(100.0, 89.0) == "faster"
    assert time_verdict(100.0, 109.0) == "same" and time_verdict(100.0, 120.0, threshold_pct=25.0) == "same"
    assert time_verdict(None, 5.0) is None and time_verdict(0.0, 5.0) is None
    assert time_verdict(100.0, math.nan) is None


def test_change_in_percent_needs_both_sides_and_a_baseline():
    assert change_pct(200.0, 250.0) == 25.0 and change_pct(200.0, 100.0) == -50.0
    assert change_pct(None, 1.0) is None and change_pct(1.0, None) is None and change_pct(0, 1.0) is None
