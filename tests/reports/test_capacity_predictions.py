"""The longest length that fits a memory budget is the largest power of two whose predicted
peak is within it: ``longest_fitting`` and ``capacity_predictions`` (profiler/predict/points.py)
and the report's capacity table (reports/capacity.py), each checked against direct
predictions at every power of two, at shapes small enough to predict them all."""

from __future__ import annotations

import pytest

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, PointRecord
from attnprof.scenarios.plan import series, shape_at, shape_problem
from attnprof.profiler.predict.points import capacity_predictions, longest_fitting
from attnprof.reports.capacity import add_predictions, capacity
from attnprof.reports.data import load
from attnprof.scenarios.scenario import Scenario

from conftest import write_run

MiB = 1 << 20
START, LIMIT = 16, 16384
LENGTHS = [START << i for i in range(11) if START << i <= LIMIT]  # 16 .. 16384
# full is quadratic, sdpa linear, lsh linear and refuses n < 2 * bucket_size (16 and 32 here)
SCENARIO = Scenario(name="capacity", variants=("full", "sdpa", "lsh[bucket_size=32]"), scope="attention",
                    seq_lens=(256,), d_model=64, heads=4, layers=1)
BUDGETS = [1 * MiB, 4 * MiB, 16 * MiB]  # every variant's boundary lies inside 16 .. 16384 for these
VARIANTS = [s[0].variant for s in series(SCENARIO)]


def at(template: Point, n: int) -> Point:
    return Point(template.variant, template.mode, template.scope, shape_at(SCENARIO, n), template.forward_only)


@pytest.fixture(scope="module")
def direct() -> dict:
    """variant -> {n: predicted peak bytes, or None where the variant cannot run at n}."""
    out = {}
    for s in series(SCENARIO):
        out[s[0].variant] = {n: None if shape_problem(at(s[0], n)) else predict(at(s[0], n), count_flops=False).peak_bytes
                             for n in LENGTHS}
    return out


def expected_longest(peaks: dict, budget: float):
    """The largest power of two whose direct prediction fits; None if none does."""
    fitting = [n for n, peak in peaks.items() if peak is not None and peak <= budget]
    return max(fitting, default=None)


def test_the_direct_predictions_grow_with_length_and_cross_every_budget(direct):
    """The premise of every search below: memory only grows with n, and the budgets
    fall inside the searched range for some variant and beyond it for another."""
    for peaks in direct.values():
        known = [p for p in peaks.values() if p is not None]
        assert known == sorted(known) and len(set(known)) == len(known)
        boundaries = [expected_longest(peaks, b) for b in BUDGETS]
        assert all(START < n < LIMIT for n in boundaries) and boundaries == sorted(set(boundaries))
    assert direct["lsh[bucket_size=32]"][32] is None and direct["lsh[bucket_size=32]"][64] is not None


@pytest.mark.parametrize("variant, budget", [(v, b) for v in VARIANTS for b in BUDGETS + [64 * MiB, 1024]])
def test_longest_fitting_is_the_largest_power_of_two_that_fits(direct, variant, budget):
    (row,) = [r for r in longest_fitting(SCENARIO, budget, start=START, limit=LIMIT) if r["variant"] == variant]
    peaks = direct[variant]
    longest = expected_longest(peaks, budget)
    assert row["longest_fitting_seq_len"] == longest
    if longest is None:  # not even the shortest fits
        assert row["predicted_peak_bytes"] is None and row["limited_by"]
        return
    assert row["predicted_peak_bytes"] == peaks[longest] <= budget
    if longest == LIMIT:
        assert "limit" in row["limited_by"]
    else:
        assert row["limited_by"].startswith(f"{2 * longest} tokens would need")
        assert peaks[2 * longest] > budget


def test_longest_fitting_when_the_shortest_lengths_are_refused(direct):
    peaks = direct["lsh[bucket_size=32]"]
    budget = 2 * MiB
    assert expected_longest(peaks, budget) == 128 and peaks[256] > budget  # 64 and 128 fit, 256 does not
    (row,) = [r for r in longest_fitting(SCENARIO, budget, start=START, limit=8192) if r["variant"].startswith("lsh")]
    assert row["longest_fitting_seq_len"] == 128


@pytest.fixture(scope="module")
def cache() -> dict:
    return capacity_predictions(SCENARIO, [b / (1 << 30) for b in BUDGETS], start=START, limit=LIMIT)


def test_capacity_predictions_are_direct_predictions_at_the_deciding_lengths(direct, cache):
    templates = {s[0].variant: s[0] for s in series(SCENARIO)}
    for variant, template in templates.items():
        keys = {at(template, n).key_text(): n for n in LENGTHS}
        made = {keys[k]: v for k, v in cache.items() if k in keys}
        assert made and all(direct[variant][n] == v for n, v in made.items())  # exact, never extrapolated
        for budget in BUDGETS:
            longest = expected_longest(direct[variant], budget)
            # the boundary is decided by predictions: the longest that fits, and the next up, were made
            assert longest in made and (longest == LIMIT or 2 * longest in made), (variant, budget, sorted(made))
            assert max(n for n, v in made.items() if v <= budget) == longest
    assert len(cache) < sum(len(p) for p in direct.values())  # a search, not every length


def test_the_report_reads_the_same_boundaries_from_the_cache_without_predicting(tmp_path, direct, cache):
    """The sweep's capacity phase writes capacity_predictions into the run folder; the
    report's table then shows verified figures, and calls no predictor at all."""
    records = []
    for s in series(SCENARIO):
        peak = direct[s[0].variant][256]
        records.append(PointRecord.for_point(s[0], status="ok", predicted_peak_bytes=peak, measured_peak_bytes=peak,
                                             measured_by="tensor-tracker", warmup=1, repeats=1))
    run = load(write_run(tmp_path / "run", records))
    add_predictions(run.path, cache)

    def refuse(point):
        raise AssertionError(f"predicted {point.variant} at {point.shape.seq_len}: not from the cache")

    budgets = {b / (1 << 30): f"{b // MiB} MiB" for b in BUDGETS}
    cap = capacity(run.frame, run.path, seconds=60, predictor=refuse, budgets=budgets)
    assert cap.calls == 0 and not cap.problems
    for variant, peaks in direct.items():
        fits = cap.fits[(variant, "attention")]
        for gib, budget in zip(budgets, BUDGETS):
            assert fits[gib].length == expected_longest(peaks, budget) and fits[gib].verified, (variant, budget)


def test_the_report_predicting_for_itself_finds_the_same_boundaries(tmp_path, direct):
    """Without a cache the report calls the real predictor (fake tensors) at the lengths
    that decide, and its figures are verified, not extrapolated, when time allows."""
    template = series(SCENARIO)[0][0]  # full: its boundaries lie inside the searched range
    peak = direct[template.variant][256]
    record = PointRecord.for_point(template, status="ok", predicted_peak_bytes=peak, measured_peak_bytes=peak,
                                   measured_by="tensor-tracker", warmup=1, repeats=1)
    run = load(write_run(tmp_path / "run", [record]))
    budgets = {b / (1 << 30): f"{b // MiB} MiB" for b in BUDGETS}
    cap = capacity(run.frame, run.path, seconds=120, budgets=budgets)
    assert cap.calls > 0 and not cap.problems
    for gib, budget in zip(budgets, BUDGETS):
        fit = cap.fits[("full", "attention")][gib]
        assert fit.length == expected_longest(direct["full"], budget) and fit.verified
