"""Fitted slopes, expected exponents, and the baseline comparison."""

import math

import pandas as pd
import pytest

from attnprof.reports.data import load, tidy
from attnprof.reports.diff import compare
from attnprof.reports.scaling import expected_exponents, fit_slope, slopes

from conftest import ci_records, synthetic_record, write_run


def test_fit_slope_recovers_a_power_law_and_needs_two_lengths():
    assert fit_slope([256, 512, 1024], [3 * n ** 1.5 for n in (256, 512, 1024)]) == pytest.approx(1.5)
    assert fit_slope([256], [1.0]) is None
    assert fit_slope([256, 512], [1.0, float("nan")]) is None


@pytest.mark.parametrize("label, expected", [("full", (2.0, 2.0)), ("lsh[n_hashes=8]", (1.0, 2.0)),
                                             ("sdpa", (1.0, 2.0)), ("<script>alert(1)</script>", None),
                                             ("no_such_variant", None), ("lsh[no_such_option=1]", None)])
def test_expected_exponents_come_from_the_registry(label, expected):
    # without lengths: the class's asymptotic orders (LSH's time is quadratic in the end: hashing)
    assert expected_exponents(label) == expected
    if expected is None:
        assert expected_exponents(label, [1024, 4096]) is None


def test_lsh_expected_time_exponent_is_its_formula_not_a_constant():
    # attention in chunks 24*r*n*c*dh (fwd+bwd) + hashing r*n*dh*n/c: at c = 64 the hashing
    # is 256/1792 of the FLOPs at 16K and 1024/2560 (40%) at 64K, so the local slope is
    # 1 + log4(2560/1792) = 1.257 (a fitted 1.26 on the measured times)
    memory, time = expected_exponents("lsh", [16384, 65536], heads=4, head_dim=64)
    assert time == pytest.approx(1 + math.log(2560 / 1792) / math.log(4), rel=1e-9)
    assert time > 1.1
    assert memory == pytest.approx(1.0, abs=1e-9)  # every memory term is linear at a fixed bucket size
    from attnprof.scenarios.variants.lsh import LSHAttention

    options = LSHAttention.resolve_options({})
    flops = [LSHAttention.cost_flops(options, n, 4, 64) for n in (16384, 65536)]
    assert time == pytest.approx(math.log(flops[1] / flops[0]) / math.log(4), rel=1e-12)
    # short lengths: the hashing is a smaller share, the slope nearer 1; more hashes do not change it
    assert 1.0 < expected_exponents("lsh", [1024, 4096])[1] < time
    assert expected_exponents("lsh[n_hashes=8]", [16384, 65536])[1] == pytest.approx(time)
    # bigger buckets: relatively cheaper hashing
    assert expected_exponents("lsh[bucket_size=128]", [16384, 65536])[1] < time


def test_single_term_variants_keep_their_exponents_at_any_lengths():
    assert expected_exponents("full", [16384, 65536]) == (2.0, 2.0)
    assert expected_exponents("sdpa", [1024, 2048, 4096])[0] == 1.0
    assert expected_exponents("full", [512]) == (2.0, 2.0)  # one length: nothing to fit


def test_sparse_expected_exponents_follow_the_stride():
    # fixed stride: the A2 part (n^2 c / l) is quadratic; the default stride l ~ sqrt(n) gives 1.5
    assert expected_exponents("sparse_fixed[stride=64]", [4096, 16384])[1] > 1.8
    assert expected_exponents("sparse_fixed", [1024, 4096, 16384])[1] == pytest.approx(1.5)
    memory = expected_exponents("sparse_strided", [1024, 4096, 16384])[0]
    assert 1.0 < memory < 1.5  # linear q/k/v terms still weigh at these lengths


def test_expected_exponents_count_a_batch_that_shrinks_with_length():
    # tokens per batch held fixed: batch = T / n, so each exponent drops by one
    lengths, batches = [1024, 2048, 4096], [16, 8, 4]
    assert expected_exponents("full", lengths, batches=batches) == pytest.approx((1.0, 1.0))
    plain = expected_exponents("lsh", lengths)
    assert expected_exponents("lsh", lengths, batches=batches) == pytest.approx((plain[0] - 1, plain[1] - 1))


def test_slopes_use_the_formula_at_the_series_lengths(tmp_path):
    records = [synthetic_record("lsh", "none", n, scope="attention") for n in (16384, 32768, 65536)]
    (slope,) = slopes(load(write_run(tmp_path / "run", records)).frame)
    # the synthetic records have d_model 64 and 4 heads: head_dim 16
    assert slope.expected == pytest.approx(expected_exponents("lsh", [16384, 32768, 65536], heads=4, head_dim=16))
    assert slope.expected[1] > 1.1


def test_slopes_fit_ok_points_only(tmp_path):
    run = load(write_run(tmp_path / "run", ci_records()))
    by_key = {(s.series, s.panel): s for s in slopes(run.frame)}
    full_plain = by_key[("full", "plain")]  # its 1024 point is an OOM
    assert full_plain.points == 2 and full_plain.memory_measured
    assert 1.0 < full_plain.memory < 2.0  # linear stack terms plus the quadratic one
    assert by_key[("sdpa", "checkpoint")].memory == pytest.approx(1.0, abs=0.01)


def test_compare_flags_regressions_improvements_and_noise(tmp_path):
    base = load(write_run(tmp_path / "base", ci_records())).frame
    changed = []
    for r in ci_records():
        key = (r.variant, r.mode, r.seq_len)
        if key == ("sdpa", "plain", 512):
            r = synthetic_record("sdpa", "plain", 512, scale=1.005)  # +0.5% memory and time: within tolerance
        elif key == ("lsh", "reversible", 256):
            r = synthetic_record("lsh", "reversible", 256, scale=0.5)  # half: an improvement
        elif key == ("sdpa", "plain", 1024):
            r = synthetic_record("sdpa", "plain", 1024, status="timeout", reason="> 120 s")
        changed.append(r.to_row())
    run = tidy(pd.DataFrame(changed))
    diff = compare(run, base)
    verdict = {(r.series, r.panel, r.seq_len): r.verdict for r in diff.itertuples()}
    assert verdict[("sdpa", "plain", 512)] == "same"
    assert verdict[("lsh", "reversible", 256)] == "improvement"
    assert verdict[("sdpa", "plain", 1024)] == "regression"
    assert sum(v != "same" for v in verdict.values()) == 2
    assert list(diff["verdict"])[:2] == ["regression", "improvement"]  # changes first


def test_compare_lists_points_only_one_run_has(tmp_path):
    base = load(write_run(tmp_path / "base", ci_records(variants=("full", "sdpa")))).frame
    run = load(write_run(tmp_path / "run", ci_records(variants=("sdpa", "lsh")))).frame
    counts = compare(run, base)["verdict"].value_counts()
    assert counts["new"] == 9 and counts["gone"] == 9 and counts["same"] == 9


def one_point_run(path, peak: int, time_ms: float = 3.0):
    r = synthetic_record("sdpa", "plain", 256)
    r.predicted_peak_bytes = r.measured_peak_bytes = peak
    r.time_fwd_ms, r.time_bwd_ms = time_ms / 3, 2 * time_ms / 3
    return write_run(path, [r])


# (baseline bytes, current bytes): around 2% of a large figure and the 64 KiB floor of a small one
CHANGES = [(10_000_000, 10_150_000), (10_000_000, 10_199_000), (10_000_000, 10_201_000), (10_000_000, 9_790_000),
           (1_000_000, 1_030_000), (1_000_000, 1_065_000), (1_000_000, 1_066_000), (1_000_000, 930_000)]


@pytest.mark.parametrize("old, new", CHANGES)
def test_the_report_and_the_gate_judge_memory_alike(tmp_path, old, new):
    """One judge (profiler.gate.verdict): the report calls a regression exactly when the gate fails."""
    from attnprof.profiler.gate import compare as gate_compare, update_baseline

    base_dir, run_dir = one_point_run(tmp_path / "base", old), one_point_run(tmp_path / "run", new)
    baseline = tmp_path / "baseline.json"
    update_baseline(baseline, base_dir)
    gate = gate_compare(baseline, run_dir)
    (verdict,) = compare(load(run_dir).frame, load(base_dir).frame)["verdict"]
    assert (verdict == "regression") == (gate.exit_code == 1)
    assert (verdict == "improvement") == bool(gate.improvements)
    assert verdict in ("regression", "improvement", "same")


@pytest.mark.parametrize("factor, verdict", [(1.5, "slower"), (0.5, "faster"), (1.05, "same"), (20.0, "slower")])
def test_time_is_slower_or_faster_never_a_regression(tmp_path, factor, verdict):
    base, run = one_point_run(tmp_path / "base", 10_000_000), one_point_run(tmp_path / "run", 10_000_000, 3.0 * factor)
    assert list(compare(load(run).frame, load(base).frame)["verdict"]) == [verdict]
