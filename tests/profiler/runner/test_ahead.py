"""runner/ahead.py: a CUDA sweep predicts its points before measuring any."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_predict_ahead_leaves_every_point_in_the_cache_for_its_worker():
    """A CUDA sweep predicts its points over the cores before measuring any: the worker then
    reads its prediction (the step as the device runs it) instead of tracing it."""
    from attnprof.profiler.measure.device_kernels import on_device
    from attnprof.profiler.predict import cache as prediction_cache
    from attnprof.profiler.records import Point, Shape
    from attnprof.profiler.runner.ahead import predict_ahead, predict_points

    points = [Point(v, m, "model", Shape(seq_len=n, d_model=32, heads=2, layers=1, dtype="bfloat16"))
              for v in ("sdpa", "full") for m in ("plain", "checkpoint") for n in (64, 128)]
    assert all(prediction_cache.load(on_device(p, "cuda")) is None for p in points)
    assert predict_points(points, "cuda") > 0
    assert all(prediction_cache.load(on_device(p, "cuda")) is not None for p in points)


def test_only_a_local_cuda_sweep_predicts_ahead_and_only_the_points_not_done(monkeypatch):
    from types import SimpleNamespace

    from attnprof.profiler.records import Point, Shape
    from attnprof.profiler.runner import ahead

    asked = []
    monkeypatch.setattr(ahead, "predict_points", lambda points, device: asked.append((points, device)) or 1.0)
    shape = Shape(seq_len=64, d_model=32, heads=2, layers=1)
    plan = [[Point("sdpa", "plain", "model", shape)], [Point("full", "plain", "model", shape)]]
    assert ahead.predict_ahead(plan, {}, SimpleNamespace(device="cpu", executor="local")) == 0.0
    assert ahead.predict_ahead(plan, {}, SimpleNamespace(device="cuda", executor="ray")) == 0.0
    assert asked == []
    done = {plan[0][0].key(): {}}  # a --resume: that point is recorded already
    assert ahead.predict_ahead(plan, done, SimpleNamespace(device="cuda:1", executor="local")) == 1.0
    assert asked == [([plan[1][0]], "cuda:1")]


@pytest.mark.parametrize("unusable", ["file in the way", "--no-cache"])
def test_nothing_is_predicted_ahead_where_no_prediction_can_be_kept(monkeypatch, tmp_path, unusable):
    """The predictions ahead are for the workers to read from the cache: where the cache
    keeps nothing (a file where its folder goes, or the cache turned off), they would be
    traced twice, the second time while the GPU waits, after up to AHEAD_S of the first."""
    import contextlib
    from types import SimpleNamespace

    from attnprof.profiler.measure.cache_folder import ENV
    from attnprof.profiler.predict import cache as prediction_cache
    from attnprof.profiler.records import Point, Shape
    from attnprof.profiler.runner import ahead

    called = []
    monkeypatch.setattr(ahead, "predict_points", lambda points, device: called.append(points) or 1.0)
    plan = [[Point("sdpa", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))]]
    settings = SimpleNamespace(device="cuda", executor="local")
    assert ahead.predict_ahead(plan, {}, settings) == 1.0 and len(called) == 1  # a usable cache: predicted
    if unusable == "file in the way":
        (tmp_path / "cache").write_text("not a folder")
        monkeypatch.setenv(ENV, str(tmp_path / "cache"))
        off = contextlib.nullcontext()
    else:
        off = prediction_cache.disabled()
    with off:
        assert ahead.predict_ahead(plan, {}, settings) == 0.0
    assert len(called) == 1


def test_a_plugins_points_are_left_to_their_workers(monkeypatch):
    """A plug-in's code runs in its point's own process only; ``within`` may run the predictions
    in the sweep's process (a multi-threaded CUDA build), where a plug-in's crash or hang would
    take the whole sweep with it."""
    from attnprof.profiler.predict import pool
    from attnprof.profiler.records import Point, Shape
    from attnprof.profiler.runner.ahead import predict_points

    asked = []
    monkeypatch.setattr(pool, "within", lambda fn, arg_tuples, seconds: asked.extend(a[0].variant for a in arg_tuples))
    shape = Shape(seq_len=64, d_model=32, heads=2, layers=1)
    predict_points([Point(v, "plain", "model", shape) for v in ("sdpa", "some_plugin_module:Cls", "sliding_window[window=32]")],
                   "cuda")
    assert asked == ["sdpa", "sliding_window[window=32]"]
