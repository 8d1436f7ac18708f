"""Exact tensor accounting of one point (profiler/measure/accounting.py): ``predict`` (profiler/predict/fake_run.py) equals
the plain full-depth fake run (``account(fake=True)``) whichever way it gets there (a deep
stack composed, a shallow one traced), keeps its figures in the prediction cache, splits
FLOPs into forward and backward, and ``measure_cpu`` is the real run's exact peak.
(Small points run for real: test_small_points.py.)"""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import Accounting, account, measure_cpu
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape


def point(label="full", mode="plain", scope="model", layers=1, dtype="bfloat16", forward_only=False, n=64) -> Point:
    return Point(label, mode, scope, Shape(batch=1, seq_len=n, d_model=32, heads=2, layers=layers, dtype=dtype),
                 forward_only=forward_only)


def figures(acc: Accounting) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_a_deep_stack_is_composed_and_equals_every_layer_run(mode):
    deep = point(mode=mode, layers=8)
    fast = predict(deep)
    assert fast.method.startswith("composed from L="), fast.method
    assert figures(fast) == figures(account(deep, fake=True, count_flops=True))
    assert fast.op_costs and not fast.cached


def test_a_shallow_stack_and_the_attention_core_are_traced_whole():
    for p in (point(layers=2), point(scope="attention", layers=8)):
        fast = predict(p)
        assert fast.method == "exact", fast.method
        assert figures(fast) == figures(predict(p, exact=True))


def test_a_prediction_is_cached_with_its_flops_even_when_they_are_not_asked_for():
    p = point(label="lsh[n_hashes=2,bucket_size=16]", layers=2)
    first = predict(p, count_flops=False)
    assert not first.cached and first.flops_fwd == first.flops_bwd == 0 and first.peak_bytes > 0
    again = predict(p)
    assert again.cached and again.peak_bytes == first.peak_bytes and again.flops_fwd > 0
    assert figures(again) == figures(account(p, fake=True, count_flops=True))


def test_flops_split_at_the_start_of_backward():
    both = account(point(layers=2), fake=True, count_flops=True)
    forward = account(point(layers=2, forward_only=True), fake=True, count_flops=True)
    assert both.flops_fwd == forward.flops_fwd > 0
    assert both.flops_bwd > both.flops_fwd and forward.flops_bwd == 0
    assert account(point(layers=2), fake=True).flops_fwd == 0  # not counted unless asked


def test_the_real_cpu_run_has_the_fake_runs_exact_peak():
    p = point(label="sdpa", layers=2, dtype="float32")
    real = measure_cpu(p)
    assert real.peak_bytes == account(p, fake=True).peak_bytes > 0
    assert real.breakdown_bytes == account(p, fake=True).breakdown_bytes
