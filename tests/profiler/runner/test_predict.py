"""Predictions (fake tensors) equal real CPU measurements byte for byte, and scale as
each algorithm says."""

import math

import pytest

from attnprof.profiler.measure.accounting import measure_cpu, predict
from attnprof.profiler.records import Point, Shape

VARIANTS = ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed[summary=4]",
            "sparse_fixed[combine=multihead,summary=4]", "lsh[n_hashes=4,bucket_size=32]"]
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
                                               ("sparse_strided", 1.5), ("sparse_fixed", 1.5)])
def test_attention_memory_slope_matches_the_algorithm(variant, expected):
    """Log-log slope of the forward+backward peak between 16K and 64K tokens (l = sqrt(n) exactly)."""
    assert abs(slope(variant, 16384, 65536) - expected) < 0.1


@pytest.mark.parametrize("variant", ["full", "sdpa", "talking_heads", "lsh", "sparse_strided",
                                     "sparse_fixed[combine=interleaved,summary=4]"])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_depth_extrapolation_equals_running_every_layer(variant, mode):
    layers = 20 if "interleaved" in variant else 10  # deep enough that the predictor extrapolates
    point = Point(variant, mode, "model", Shape(batch=1, seq_len=256, d_model=32, heads=4, layers=layers))
    fast, exact = predict(point), predict(point, exact=True)
    assert fast.method.startswith("extrapolated") and exact.method == "exact"
    assert (fast.peak_bytes, fast.breakdown_bytes, fast.flops_fwd, fast.flops_bwd) == \
           (exact.peak_bytes, exact.breakdown_bytes, exact.flops_fwd, exact.flops_bwd)
