"""One point's prediction (profiler/predict/fake_run.py): which path a point takes, and that
each gives the plain full-depth fake run's figures."""

from __future__ import annotations

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict import fake_run
from attnprof.profiler.records import Point, Shape


def _point(dtype="float32", n=64, layers=2, variant="sdpa"):
    return Point(variant, "plain", "model", Shape(batch=1, seq_len=n, d_model=32, heads=2, layers=layers, dtype=dtype))


def figures(acc):
    return acc.peak_bytes, acc.breakdown_bytes, acc.flops_fwd, acc.flops_bwd


def test_small_float32_points_run_for_real_and_others_do_not():
    assert fake_run.small_point(_point())
    assert not fake_run.small_point(_point(dtype="bfloat16"))
    assert not fake_run.small_point(_point(n=1 << 16))


def test_each_path_gives_the_full_depth_figures(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNPROF_CACHE_DIR", str(tmp_path))
    small = fake_run.predict(_point())
    assert small.method.startswith("exact (a small point")
    assert figures(small) == figures(account(_point(), fake=True, count_flops=True))
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)
    deep = _point(layers=4)
    composed = fake_run.predict(deep)
    assert composed.method == "composed from L=3" and not composed.cached
    assert figures(composed) == figures(account(deep, fake=True, count_flops=True))
    assert fake_run.predict(deep).cached
    assert fake_run.predict(deep, count_flops=False).flops_fwd == 0
