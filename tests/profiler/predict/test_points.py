"""Predictions (fake tensors) equal real CPU measurements byte for byte, and scale as
each algorithm says."""

import math

import pytest

from attnprof.profiler.predict import fake_run
from attnprof.profiler.measure.accounting import measure_cpu
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

VARIANTS = ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed[summary=4]",
            "sparse_fixed[combine=multihead,summary=4]", "lsh[n_hashes=4,bucket_size=32]",
            "sliding_window[window=64]"]
SMALL = Shape(batch=2, seq_len=256, d_model=32, heads=4, layers=2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode, scope", [("plain", "model"), ("checkpoint", "model"), ("reversible", "model"),
                                         ("none", "attention")])
def test_prediction_equals_measurement_byte_for_byte(variant, mode, scope):
    point = Point(variant, mode, scope, SMALL)
    predicted, measured = predict(point), measure_cpu(point)
    assert predicted.peak_bytes == measured.peak_bytes
    assert predicted.breakdown_bytes == measured.breakdown_bytes
    assert sum(predicted.breakdown_bytes.values()) == predicted.peak_bytes


def test_forward_only_prediction_equals_measurement():
    point = Point("sdpa", "plain", "model", SMALL, forward_only=True)
    assert predict(point).peak_bytes == measure_cpu(point).peak_bytes
    assert predict(point).flops_bwd == 0


def test_64k_full_attention_holds_16_gib_scores_and_says_which_op_made_them():
    point = Point("full", "none", "attention", Shape(batch=1, seq_len=65536, d_model=64, heads=1), forward_only=True)
    acc = predict(point, count_flops=False)
    assert acc.peak_bytes >= 16 * 2**30
    top = acc.largest_at_peak[0]
    assert top["bytes"] == 65536 * 65536 * 4 and top["shape"][-2:] == [65536, 65536]


def test_flops_match_the_analytic_formula():
    """Exact attention forward: 4*b*h*n^2*d FLOPs (two n x n x d matmuls); fused causal halves it."""
    b, h, n, d = 2, 4, 512, 16
    shape = Shape(batch=b, seq_len=n, d_model=h * d, heads=h)
    full = predict(Point("full", "none", "attention", shape))
    assert full.flops_fwd == 4 * b * h * n * n * d
    sdpa = predict(Point("sdpa", "none", "attention", shape))
    assert sdpa.flops_fwd == 4 * b * h * n * n * d // 2
    sdpa_bi = predict(Point("sdpa[causal=false]", "none", "attention", shape))
    assert sdpa_bi.flops_fwd == 4 * b * h * n * n * d
    assert full.flops_bwd == 2 * full.flops_fwd  # dQ, dK, dV, dP: four matmuls of the same size


def slope(variant: str, n1: int, n2: int) -> float:
    # head_dim 16: the O(n) inputs and gradients stay small beside the scores, so the
    # slope shows the scores' own growth
    peaks = [predict(Point(variant, "none", "attention", Shape(batch=1, seq_len=n, d_model=64, heads=4)),
                     count_flops=False).peak_bytes for n in (n1, n2)]
    return math.log(peaks[1] / peaks[0]) / math.log(n2 / n1)


@pytest.mark.parametrize("variant, expected", [("full", 2.0), ("talking_heads", 2.0), ("sdpa", 1.0), ("lsh", 1.0),
                                               ("sparse_strided", 1.5), ("sparse_fixed", 1.5),
                                               ("sliding_window", 1.0)])
def test_attention_memory_slope_matches_the_algorithm(variant, expected):
    """Log-log slope of the forward+backward peak between 16K and 64K tokens (l = sqrt(n) exactly)."""
    assert abs(slope(variant, 16384, 65536) - expected) < 0.1


@pytest.mark.parametrize("variant", ["full", "sdpa", "talking_heads", "lsh", "sparse_strided",
                                     "sparse_fixed[combine=interleaved,summary=4]", "sliding_window[window=64]"])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_depth_composition_equals_running_every_layer(variant, mode, monkeypatch):
    """The fast path (three periods traced, the depth composed) against ``exact=True``,
    which runs ``account`` itself: every layer, the tracker and FlopCounter as separate
    modes (tests/profiler/predict/test_compose.py covers depths, dtypes, options). The
    point is small enough to be run for real (test_small_points.py): not here."""
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)
    layers = 20 if "interleaved" in variant else 10  # deep enough that the predictor composes
    point = Point(variant, mode, "model", Shape(batch=1, seq_len=256, d_model=32, heads=4, layers=layers))
    fast, exact = predict(point), predict(point, exact=True)
    assert exact.method == "exact" and fast.method.startswith("composed")
    assert (fast.peak_bytes, fast.breakdown_bytes, fast.largest_at_peak, fast.flops_fwd, fast.flops_bwd) == \
           (exact.peak_bytes, exact.breakdown_bytes, exact.largest_at_peak, exact.flops_fwd, exact.flops_bwd)


# --- many predictions: in this process or spread over forked workers ----------------------------
def _square(x):
    return x * x


def _pid_of(_):
    import os

    return os.getpid()


def test_spread_keeps_the_order_and_uses_workers_only_for_enough_tasks():
    import os

    from attnprof.profiler.predict.pool import SPREAD_FROM, spread

    assert spread(_square, list(range(20)), workers=2) == [x * x for x in range(20)]
    assert set(spread(_pid_of, list(range(SPREAD_FROM - 1)), workers=2)) == {os.getpid()}  # few: no fork
    assert spread(_square, [], workers=2) == []


def test_predicting_many_points_in_parallel_equals_one_by_one():
    from attnprof.profiler.predict.points import prediction_record
    from attnprof.profiler.predict.pool import spread

    points = [Point(v, m, "model", Shape(batch=1, seq_len=128, d_model=32, heads=4, layers=2))
              for v in ("sdpa", "full") for m in ("plain", "checkpoint", "reversible")]
    parallel = spread(prediction_record, points, workers=2)
    serial = [prediction_record(p) for p in points]
    keys = ("variant", "mode", "predicted_peak_bytes", "predicted_breakdown_bytes", "flops")
    assert [{k: r[k] for k in keys} for r in parallel] == [{k: r[k] for k in keys} for r in serial]


@pytest.mark.slow
def test_a_budget_search_over_both_cores_equals_one_in_this_process(monkeypatch):
    """Every prediction of the search scheduled on its own (predict/pool.py) changes
    nothing in the rows: the same lengths, peaks and limits as one process, one series
    after the other."""
    from attnprof.profiler.predict import points as runner
    from attnprof.scenarios.scenario import Scenario

    sc = Scenario(variants=("full", "sdpa", "lsh[bucket_size=16]"), modes=("plain", "reversible"), d_model=32,
                  heads=2, layers=2)
    parallel = runner.longest_fitting(sc, 24 << 20, start=64, limit=1 << 14)
    monkeypatch.setattr(runner, "usable_cores", lambda: 1)
    serial = runner.longest_fitting(sc, 24 << 20, start=64, limit=1 << 14)
    assert [{k: v for k, v in r.items() if k not in ("predict_ms", "prediction_cached")} for r in parallel] == \
        [{k: v for k, v in r.items() if k not in ("predict_ms", "prediction_cached")} for r in serial]
    assert len({r["longest_fitting_seq_len"] for r in parallel}) > 1


def test_a_budget_search_over_two_series_uses_the_cores_and_one_series_does_not(monkeypatch):
    from attnprof.profiler.predict import points as runner
    from attnprof.scenarios.scenario import Scenario

    asked = []
    monkeypatch.setattr(runner, "usable_cores", lambda: 2)
    monkeypatch.setattr(runner, "run_chains", lambda step, chains, workers, **kw: asked.append(workers) or [])
    for modes in (("plain", "checkpoint"), ("plain",)):
        runner.longest_fitting(Scenario(variants=("sdpa",), modes=modes, d_model=32, heads=2), 1 << 30)
    assert asked == [2, 1]


# --- the budget at a finer resolution -----------------------------------------------------------
def _budget_scenario(variant):
    from attnprof.scenarios.scenario import Scenario

    return Scenario(name="res", variants=(variant,), scope="attention", seq_lens=(256,), d_model=64, heads=4,
                    layers=1)


@pytest.mark.parametrize("variant, resolution, budget_mib", [("sdpa", 96, 3), ("full", 100, 8),
                                                              ("lsh[bucket_size=32]", 100, 48)])
def test_resolution_finds_the_longest_accepted_multiple_that_fits(variant, resolution, budget_mib):
    """Checked against direct predictions at every multiple of the resolution the variant
    accepts, up to the first power of two that does not fit: the answer is the longest
    that fits, found by exact predictions; LSH accepts only multiples of 2 x 32 = 64
    (so of lcm(100, 64) = 1600 here)."""
    from attnprof.scenarios.plan import shape_at, shape_problem
    from attnprof.profiler.predict.points import longest_fitting

    sc = _budget_scenario(variant)
    budget = budget_mib << 20
    (row,) = longest_fitting(sc, budget, start=64, limit=1 << 14, resolution=resolution)
    (power,) = longest_fitting(sc, budget, start=64, limit=1 << 14)
    top = 2 * power["longest_fitting_seq_len"]
    template = Point(variant, "none", "attention", shape_at(sc, 256))

    def at(n):
        return Point(template.variant, template.mode, template.scope, shape_at(sc, n))

    accepted = [n for n in range(resolution, top, resolution) if shape_problem(at(n)) is None]
    peaks = {n: predict(at(n), count_flops=False).peak_bytes for n in accepted}
    fitting = [n for n in accepted if peaks[n] <= budget]
    assert row["longest_fitting_seq_len"] == max(fitting) and row["resolution"] == resolution
    assert row["predicted_peak_bytes"] == peaks[max(fitting)] <= budget
    if not variant.startswith("lsh"):  # at least the longest multiple below the longest fitting power of two
        assert row["longest_fitting_seq_len"] > power["longest_fitting_seq_len"] - resolution
    nxt = min(n for n in accepted + [top] if n > max(fitting))
    assert row["limited_by"].startswith(f"{nxt} tokens would need")
    assert row["monotone"] and not row["monotone_note"]
    assert row["lengths_predicted"] < len(accepted) + 14  # a search, not every length
    if variant.startswith("lsh"):
        assert all(n % 64 == 0 for n in accepted) and row["longest_fitting_seq_len"] % 1600 == 0


def test_a_peak_that_is_not_monotone_in_length_is_reported():
    """Binary search assumes the peak grows with n; the lengths a search predicted say
    whether they bear that out, and the table says where they do not."""
    from attnprof.profiler.predict import points as runner

    series = runner.Series(_budget_scenario("sdpa"), Point("sdpa", "none", "attention", Shape(seq_len=256)))
    for n, peak in [(512, 10), (1024, 30), (2048, 20), (4096, 40)]:
        series.records[n] = {"status": "ok", "predicted_peak_bytes": peak}
    monotone, note = series.monotone()
    assert not monotone and note.startswith("predicted peak is not monotone in n: 30 B at 1024 tokens but 20 B at 2048")
    del series.records[2048]
    assert series.monotone() == (True, "")
    row = {"variant": "sdpa", "mode": "none", "longest_fitting_seq_len": 1024, "predicted_peak_bytes": 30,
           "limited_by": "x", "resolution": None, "monotone_note": note}
    assert f"note: sdpa none: {note}" in runner.format_table([row], 35)


def test_resolution_and_budget_flags_are_one_line_errors():
    import subprocess
    import sys

    for args, message in [(["--resolution", "100"], "goes with --budget"),
                          (["--budget", "1GiB", "--resolution", "0"], "positive"),
                          (["--budget", "1GiB", "--resolution", "x"], "resolution")]:
        done = subprocess.run([sys.executable, "-m", "attnprof", "predict", *args], capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
        assert done.stderr.startswith("error:") and message in done.stderr
