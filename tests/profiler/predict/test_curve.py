"""The capacity curve (profiler/predict/curve.py): estimates, fits, the lengths that decide
them, the deadline-bounded search over curves, and the pool's deadline."""

from __future__ import annotations

from attnprof.profiler.predict.curve import MAX_EXP, MIN_EXP, Curve, gpu_value, search_curves
from attnprof.profiler.predict.pool import within


def _curve(known=None, exponent=2.0):
    return Curve("s", "p", lambda n: n, exponent, dict(known or {}))


def test_estimates_are_the_known_figures_or_a_power_law_between_them():
    c = _curve({16: 100.0, 64: 1600.0})
    assert c.estimate(16) == 100.0 and c.estimate(64) == 1600.0
    assert abs(c.estimate(32) - 400.0) < 1e-6  # quadratic between them: log-log
    assert _curve({16: 100.0}).estimate(32) == 200.0  # one point: linear


def test_a_fit_is_verified_only_when_its_deciding_lengths_are_known():
    peaks = {1 << e: float(1 << (2 * e)) for e in range(MIN_EXP, MAX_EXP + 1)}
    c = _curve(peaks)
    fit = c.fit(float(1 << 20))  # 2**20 bytes: n = 2**10 fits exactly
    assert fit.length == 1 << 10 and fit.verified and not fit.at_cap
    partial = _curve({16: 256.0, 1 << 15: float(1 << 30)})
    assert not partial.fit(float(1 << 20)).verified
    assert partial.deciding_for(float(1 << 20))  # what it still needs
    assert c.fit(float(1 << 50)).at_cap


def test_the_search_predicts_exactly_the_deciding_lengths_until_each_fit_is_decided():
    asked = []

    def predict_at(curve, n):
        asked.append(n)
        curve.known[n] = float(n * n)
        return 1

    curves = [_curve(), _curve()]
    calls = search_curves(curves, lambda c: [float(1 << 20)], 16, seconds=600, warm=True, predict_at=predict_at)
    assert calls == len(asked)
    for c in curves:
        fit = c.fit(float(1 << 20))
        assert fit.length == 1 << 10 and fit.verified
    assert len(asked) < 2 * (MAX_EXP - MIN_EXP + 1)  # not every length


def test_the_search_stops_at_its_time_budget():
    calls = search_curves([_curve()], lambda c: [1.0e9], 16, seconds=0.0, warm=False,
                          predict_at=lambda c, n: 1)
    assert calls == 0


def test_a_gpu_that_runs_out_counts_as_above_its_memory():
    assert gpu_value({"gpu_total_bytes": 10, "gpu_fits": True}, 100) == 10.0
    assert gpu_value({"gpu_total_bytes": 10, "gpu_fits": False}, 100) == 101.0


def test_within_keeps_what_finishes_in_order():
    assert within(pow, [(2, 3), (3, 2), (2, 10)], seconds=600) == [8, 9, 1024]
    assert within(pow, [], seconds=600) == []
