"""Longest power-of-two length that fits a budget: search, verification, cache."""

import pytest

from attnprof.errors import UserError
from attnprof.profiler.records import Point, Shape
from attnprof.reports.capacity import BUDGETS_GIB, CACHE_FILE, MAX_EXP, capacity, default_predictor
from attnprof.reports.data import load
from attnprof.profiler.units import GIB

from conftest import synthetic_record, write_run


def quadratic(point) -> int:
    """A stand-in predictor: 1000 bytes per n**2 (and a fixed 1 MiB), exact and instant."""
    return 1000 * point.shape.seq_len ** 2 + (1 << 20)


def run_of(tmp_path, variant="full", lengths=(256, 512, 1024), peak=quadratic, batches=None):
    records = []
    for i, n in enumerate(lengths):
        r = synthetic_record(variant, "plain", n)
        r.batch = batches[i] if batches else 1
        r.predicted_peak_bytes = r.measured_peak_bytes = 1000 * n * n + (1 << 20)
        records.append(r)
    return load(write_run(tmp_path / "run", records))


def longest(budget_gib: int) -> int:
    n = 1
    while 1000 * (2 * n) ** 2 + (1 << 20) <= budget_gib * GIB:
        n *= 2
    return n


def test_with_time_to_predict_every_boundary_is_verified(tmp_path):
    run = run_of(tmp_path)
    cap = capacity(run.frame, run.path, seconds=60, predictor=quadratic)
    fits = cap.fits[("full", "plain")]
    for budget in BUDGETS_GIB:
        assert fits[budget].length == longest(budget) and fits[budget].verified
    assert cap.calls > 0 and not cap.problems


def test_without_time_figures_are_extrapolated_and_marked(tmp_path):
    run = run_of(tmp_path)
    cap = capacity(run.frame, run.path, seconds=0, predictor=quadratic)
    fits = cap.fits[("full", "plain")]
    assert cap.calls == 0
    assert all(not f.verified for f in fits.values())
    # 'full' is quadratic (complexity[0] = 2): a*n + b*n**2 through the run's points is exact here
    assert [f.length for f in fits.values()] == [longest(b) for b in BUDGETS_GIB]


def test_predictions_are_cached_in_the_run_folder(tmp_path):
    run = run_of(tmp_path)
    first = capacity(run.frame, run.path, seconds=60, predictor=quadratic)
    assert (run.path / CACHE_FILE).exists()

    def refuse(point):
        raise AssertionError("should have come from the cache")

    again = capacity(run.frame, run.path, seconds=60, predictor=refuse)
    assert again.calls == 0 and not again.problems
    assert again.fits == first.fits


def test_a_prediction_that_fails_is_reported_not_raised(tmp_path):
    run = run_of(tmp_path, variant="lsh[n_hashes=8]")

    def fails(point):
        raise ValueError(f"no fake-tensor kernel for {point.variant!r}")

    cap = capacity(run.frame, run.path, seconds=60, predictor=fails)
    assert "no fake-tensor kernel for 'lsh[n_hashes=8]'" in cap.problems[("lsh[n_hashes=8]", "plain")]
    assert not cap.fits[("lsh[n_hashes=8]", "plain")][16].verified


@pytest.mark.parametrize("variant", ["no_such_variant", "canary_mod:Evil", "full:Evil", "sdpa.x:Y[a=1]"])
def test_labels_that_are_not_builtins_are_never_predicted(tmp_path, variant):
    """A plug-in's (or an unknown) label is data: its fits come from the run's records alone."""
    run = run_of(tmp_path, variant=variant)

    def refuse(point):
        raise AssertionError(f"predicted {point.variant!r}")

    cap = capacity(run.frame, run.path, seconds=60, predictor=refuse)
    assert cap.calls == 0 and "not a built-in variant" in cap.problems[(variant, "plain")]
    assert cap.fits[(variant, "plain")][16].length > 0  # extrapolated from the records
    with pytest.raises(UserError, match="not a built-in variant"):
        default_predictor(Point(variant, "plain", "model", Shape(seq_len=256, d_model=64, heads=4)))


def test_at_the_search_cap_the_fit_says_so(tmp_path):
    run = run_of(tmp_path)
    cap = capacity(run.frame, run.path, seconds=60, predictor=lambda p: 1024 * p.shape.seq_len)
    fit = cap.fits[("full", "plain")][141]
    assert fit.length == 1 << MAX_EXP and fit.at_cap and fit.verified


def test_tokens_per_batch_runs_predict_with_the_batch_the_sweep_would_use(tmp_path):
    run = run_of(tmp_path, batches=(16, 8, 4))  # 4096 tokens per batch
    seen = []

    def record(point):
        seen.append((point.shape.seq_len, point.shape.batch))
        return quadratic(point)

    capacity(run.frame, None, seconds=60, predictor=record)
    assert seen and all(b == max(1, 4096 // n) for n, b in seen)


def test_budget_keys_are_the_issue_budgets():
    assert list(BUDGETS_GIB) == [16, 24, 40, 80, 141]


def test_a_real_prediction_for_a_builtin_variant(tmp_path):
    """The default predictor (fake tensors, a few seconds for its first call): sdpa's memory
    is linear in n, so at this tiny shape even 1M tokens fits 16 GiB, and one call shows it."""
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.records import Point, Shape

    record = synthetic_record("sdpa", "plain", 256)
    shape = Shape(seq_len=256, d_model=64, heads=4, layers=2)
    record.predicted_peak_bytes = predict(Point("sdpa", "plain", "model", shape), count_flops=False).peak_bytes
    run = load(write_run(tmp_path / "run", [record]))
    cap = capacity(run.frame, run.path, seconds=60)
    fit = cap.fits[("sdpa", "plain")][16]
    assert cap.calls == 1 and fit.length == 1 << MAX_EXP and fit.at_cap and fit.verified


def test_fit_text_marks_extrapolation_the_cap_and_absence():
    from attnprof.reports.capacity import Fit, fit_text

    assert fit_text(Fit(16384, True, False)) == "16K"
    assert fit_text(Fit(16384, False, False)) == "~16K"
    assert fit_text(Fit(1 << MAX_EXP, True, True)) == "1M+"
    assert fit_text(Fit(0, True, False)) == "<16"
    assert fit_text(None) == "?" and fit_text(None, ran=False) == "–"


def test_a_render_cache_entry_written_by_other_code_is_never_used(tmp_path, monkeypatch):
    """The report's cache is keyed as the prediction cache is (its versions tag, holding the
    source digest): after a code change an entry is stale, not read."""
    from attnprof.profiler.predict import cache
    from attnprof.reports import render_cache

    render_cache.write_cache(tmp_path, {"point": 123})
    assert render_cache.read_cache(tmp_path) == ({"point": 123}, None)
    monkeypatch.setattr(cache, "source_digest", lambda: "0" * 64)  # the code changed
    assert render_cache.read_cache(tmp_path) == ({}, None)
    render_cache.write_cache(tmp_path, {"point": 456})
    assert render_cache.read_cache(tmp_path) == ({"point": 456}, None)
    monkeypatch.undo()
    assert render_cache.read_cache(tmp_path) == ({}, None)  # the stale entry was dropped on writing


def test_an_unversioned_render_cache_is_stale_not_a_problem(tmp_path):
    """A run folder's cache from before the versions tag (point key -> bytes) is dropped
    silently: no warning, nothing read."""
    import json

    from attnprof.reports import render_cache

    (tmp_path / render_cache.CACHE_FILE).write_text(json.dumps({"point": 123}))
    assert render_cache.read_cache(tmp_path) == ({}, None)
    (tmp_path / render_cache.CACHE_FILE).write_text(json.dumps({"point": -1}))
    assert render_cache.read_cache(tmp_path)[1] == "1 of 1 entries invalid (first: 'point': int where an object of points belongs)"


def test_a_series_point_keeps_the_later_identity_fields_of_its_records():
    """issue 24: the capacity curve of a SwiGLU/RMSNorm series predicts SwiGLU/RMSNorm points."""
    import pandas as pd

    from attnprof.profiler.records import Point, PointRecord, Shape
    from attnprof.reports.capacity import point_maker

    shape = Shape(seq_len=256, d_model=32, heads=2, layers=2, mlp="swiglu", ffn_dim=88, norm="rmsnorm")
    rows = pd.DataFrame([PointRecord.for_point(Point("sdpa", "plain", "model", shape)).to_row()])
    point = point_maker(rows)(1024)
    assert point.shape == Shape(seq_len=1024, d_model=32, heads=2, layers=2, mlp="swiglu", ffn_dim=88, norm="rmsnorm")
