"""Fitted slopes and expected exponents (reports.scaling)."""

import math

import pytest

from attnprof.reports.data import load
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

