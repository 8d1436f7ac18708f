"""Mixed precision (issue 24, --precision amp-bf16 | amp-fp16; Shape.autocast): the fast
prediction equals the plain full-depth fake run and a real CPU run, to the byte, in every mode;
a small autocast point is predicted by a real run except LSH's (fake_run.small_point), so the
equality with the fake run is what lets it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.records import Point, Shape


def amp(label: str, mode: str, scope: str = "model", autocast: str = "bfloat16", **kw) -> Point:
    return Point(label, mode, scope, Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=2, autocast=autocast), **kw)


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak


@pytest.mark.parametrize("label", ["sdpa", "full", pytest.param("lsh[n_hashes=2,bucket_size=16]", marks=pytest.mark.slow),
                                   pytest.param("talking_heads", marks=pytest.mark.slow),
                                   pytest.param("sparse_strided[stride=16]", marks=pytest.mark.slow),
                                   pytest.param("sparse_fixed[stride=16]", marks=pytest.mark.slow),
                                   pytest.param("sliding_window[window=32]", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_amp_bf16_prediction_equals_the_real_cpu_tracker(label, mode):
    point = amp(label, mode)
    fast = predict(point)
    assert figures(fast) == figures(account(point, fake=False))  # real CPU tensors
    assert figures(fast) == figures(account(point, fake=True))
    assert fast.breakdown_bytes["autocast_copies"] > 0  # the bf16 weight copies, under their own name


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_amp_fp16_with_its_grad_scaler_too(mode):
    point = amp("sdpa", mode, autocast="float16")
    assert figures(predict(point)) == figures(account(point, fake=False))


@pytest.mark.parametrize("forward_only", [False, True])
def test_scope_attention_and_forward_only(forward_only):
    point = amp("full", "none", "attention", forward_only=forward_only)
    assert figures(predict(point)) == figures(account(point, fake=False))


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("label", ["sdpa", "sparse_strided[stride=16]"])
def test_with_the_optimizer_step_the_real_run_equals_the_fake_one(label, optimizer):
    point = amp(label, "plain")
    point = replace(point, shape=replace(point.shape, optimizer=optimizer))
    assert small_point(point)
    assert figures(account(point, fake=False)) == figures(account(point, fake=True))


def test_small_autocast_points_run_for_real_except_lsh():
    assert small_point(amp("sdpa", "plain", autocast=""))
    assert small_point(amp("sdpa", "plain"))
    assert predict(amp("sdpa", "plain")).method.startswith("exact (a small point")
    assert not small_point(amp("lsh", "plain"))
    assert predict(amp("lsh[n_hashes=2,bucket_size=16]", "plain")).method == "exact"
