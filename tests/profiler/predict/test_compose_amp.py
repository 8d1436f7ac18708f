"""Autocast points through the depth composition (issue 24): exact at every depth. The
autocast weight cache is cleared when the forward's autocast region exits, freeing copies
of every layer at once (a loop over all periods), which the composition refuses by its own
rule: such a stack runs every layer (method "exact; not composed ..."), never a guess."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
@pytest.mark.parametrize("autocast", ["bfloat16", pytest.param("float16", marks=pytest.mark.slow)])
def test_a_deep_autocast_stack_is_exact(mode, autocast):
    point = Point("sdpa", mode, "model", Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=5, autocast=autocast))
    fast = predict(point)
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))
    assert fast.method.startswith("exact; not composed from L=3")  # the cache clear loops over every layer


def test_without_autocast_the_same_stack_composes():
    point = Point("sdpa", "plain", "model", Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=5))
    assert predict(point).method == "composed from L=3"
