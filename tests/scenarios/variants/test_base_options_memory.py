"""Memory of the attention options (issue 24: grouped KV heads, RoPE, attention dropout):
the prediction equals the real CPU tracker to the byte (pattern of
tests/profiler/measure/test_small_points.py) in plain, checkpoint and reversible modes and
at scope attention; the depth composition composes them exactly (pattern of
tests/profiler/predict/test_compose.py); the defaults are byte-identical to no option."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

SCOPES = [("plain", "model"), ("checkpoint", "model"), ("reversible", "model"), ("none", "attention")]
CASES = [  # (label, kv_heads, rope)
    ("full", 1, False), ("full", 2, True), ("sdpa", 1, False), ("sdpa", 2, True),
    ("sparse_strided", 1, True), ("sparse_fixed[summary=4]", 2, False), ("lsh[n_hashes=2,bucket_size=16]", 0, True),
    ("full[dropout=0.1]", 0, False), ("talking_heads[dropout=0.1]", 1, True), ("sdpa[dropout=0.1]", 2, False),
]


def small(label, mode, scope, kv_heads, rope, layers=2, n=128, dtype="float32") -> Point:
    return Point(label, mode, scope, Shape(batch=2, seq_len=n, d_model=32, heads=4, layers=layers,
                                           kv_heads=kv_heads, rope=rope, dtype=dtype))


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.slow
@pytest.mark.parametrize("label,kv_heads,rope", CASES)
@pytest.mark.parametrize("mode,scope", SCOPES)
def test_the_prediction_equals_the_real_tracker_to_the_byte(label, kv_heads, rope, mode, scope):
    point = small(label, mode, scope, kv_heads, rope)
    fake = account(point, fake=True, count_flops=True)
    assert figures(predict(point)) == figures(fake)
    real = account(point, fake=False)
    assert (real.peak_bytes, real.breakdown_bytes) == (fake.peak_bytes, fake.breakdown_bytes)


@pytest.mark.parametrize("mode,scope", SCOPES)
def test_the_options_change_the_figures(mode, scope):
    """Each option is really applied (else the equalities above would hold trivially)."""
    plain = predict(small("full", mode, scope, 0, False)).peak_bytes
    assert predict(small("full", mode, scope, 1, False)).peak_bytes != plain
    assert predict(small("full", mode, scope, 0, True)).peak_bytes != plain
    assert predict(small("full[dropout=0.1]", mode, scope, 0, False)).peak_bytes != plain


@pytest.mark.slow
@pytest.mark.parametrize("label", ["full", "sdpa", "lsh[n_hashes=2,bucket_size=16]"])
@pytest.mark.parametrize("mode,scope", SCOPES)
def test_the_defaults_are_byte_identical(label, mode, scope):
    """kv_heads = heads (or 0) and dropout=0.0 are the default model, op for op."""
    from attnprof.profiler.measure.drive import trace_point

    base = small(label, mode, scope, 0, False)
    same = small(label, mode, scope, 4, False)
    assert figures(account(same, fake=True, count_flops=True)) == figures(account(base, fake=True, count_flops=True))
    if not label.startswith("lsh"):
        zero = small(f"{label}[dropout=0.0]", mode, scope, 0, False)
        assert trace_point(zero).op_costs() == trace_point(base).op_costs()


COMPOSE = [("sdpa", 2, True), ("full", 1, False), ("full[dropout=0.1]", 0, True),
           ("sparse_strided[combine=interleaved]", 1, True), ("lsh[bucket_size=32]", 0, True)]


@pytest.mark.slow
@pytest.mark.parametrize("label,kv_heads,rope", COMPOSE)
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_the_depth_composition_composes_them_exactly(label, kv_heads, rope, mode, monkeypatch):
    from attnprof.profiler.predict.compose import TRACED_PERIODS
    from attnprof.scenarios.variants.registry import parse_variant

    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)  # the fake-tensor path the composition is part of
    period = parse_variant(label).layer_period()
    point = small(label, mode, "model", kv_heads, rope, layers=7 * period, n=256)
    fast = predict(point)
    assert fast.method == f"composed from L={TRACED_PERIODS * period}"
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))
