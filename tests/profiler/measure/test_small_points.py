"""Small points are predicted by running them on real CPU tensors (predict/fake_run.small_point):
the same figures as the plain full-depth fake run, to the byte, and the same per-op costs;
no fake-tensor machinery imported; a run that outgrows its limit falls back to fake
tensors; plug-in variants and large points never run for real."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnprof.profiler.predict import fake_run
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.records import Point, Shape

REAL = "exact (a small point: run on real CPU tensors)"
LABELS = ["full", "sdpa", "talking_heads", "lsh[n_hashes=2,bucket_size=16]", "sparse_strided",
          "sparse_fixed[summary=4]", "sparse_strided[combine=interleaved]", "sliding_window[window=16]",
          "sliding_window[window=24,causal=false]"]
SCOPES = [("plain", "model"), ("checkpoint", "model"), ("reversible", "model"), ("none", "attention")]


def small(label: str, mode: str, scope: str, dtype: str = "float32", layers: int = 2) -> Point:
    return Point(label, mode, scope, Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=layers, dtype=dtype))


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("mode,scope", SCOPES)
def test_a_real_run_of_a_small_point_equals_the_fake_run(label, mode, scope):
    point = small(label, mode, scope)
    fast = predict(point)
    assert fast.method == REAL
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))
    assert fast.op_costs == trace_point(point).op_costs()  # fake tensors, every layer


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_bfloat16_points_take_the_fake_path(mode):
    """Real bfloat16 CPU kernels lay out an LSH backward tensor unlike the fake kernels
    (the real run views it, the fake one copies first): bfloat16 is never run for real."""
    point = small("lsh[n_hashes=2,bucket_size=16]", mode, "model", "bfloat16")
    assert not small_point(point)
    fake = trace_point(point).op_costs()
    real = trace_point(point, real_limit_bytes=fake_run.REAL_LIMIT_BYTES).op_costs()
    assert real != fake  # why: if this ever holds, bfloat16 could run for real too
    assert predict(point).op_costs == fake


def test_a_deep_small_stack_runs_every_layer_for_real():
    point = small("sdpa", "checkpoint", "model", layers=7)
    assert predict(point).method == REAL
    assert figures(predict(point)) == figures(account(point, fake=True, count_flops=True))


def test_a_real_run_past_its_limit_falls_back_to_fake_tensors(monkeypatch):
    point = small("full", "plain", "model")
    monkeypatch.setattr(fake_run, "REAL_LIMIT_BYTES", 64 << 10)
    fast = predict(point)
    assert fast.method == "exact"
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))


def test_mutation_a_real_run_that_lost_its_tracker_is_caught(monkeypatch):
    """The equality above can fail: a real run whose tracker misses the parameters' storages."""
    from attnprof.profiler.measure import drive as driving

    original = driving.drive

    def drive_without_parameters(work, tracker, **kwargs):
        kwargs["track_parameters"] = lambda: None
        return original(work, tracker, **kwargs)

    monkeypatch.setattr(driving, "drive", drive_without_parameters)
    point = small("sdpa", "plain", "model")
    assert figures(predict(point)) != figures(account(point, fake=True, count_flops=True))


def test_large_points_and_plug_ins_are_never_run_for_real(tmp_path, monkeypatch):
    assert small_point(small("full", "plain", "model"))
    assert not small_point(Point("full", "plain", "model", Shape(seq_len=4096, d_model=256, heads=4, layers=2)))
    assert not small_point(Point("lsh[n_hashes=64]", "plain", "model", Shape(seq_len=512, d_model=64, heads=4)))
    (tmp_path / "my_attn.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Mine(FullAttention):\n    description = 'mine'\n    paper = 'me, arXiv 0000.00000'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not small_point(small("my_attn:Mine", "plain", "model"))


def test_predicting_a_small_point_imports_no_fake_tensor_machinery(tmp_path):
    code = ("import sys\nfrom attnprof.profiler.predict.fake_run import predict\n"
            "from attnprof.profiler.records import Point, Shape\n"
            "acc = predict(Point('sdpa', 'plain', 'model', Shape(seq_len=256, d_model=64, heads=2)))\n"
            "print(acc.method)\n"
            "print(sorted(m for m in ('sympy', 'torch.fx.experimental.symbolic_shapes') if m in sys.modules))\n")
    env = {**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines() == [REAL, "[]"]


OPENMP_STARTED = "import torch\ntorch.set_num_threads(2)\n(torch.randn(512, 512) @ torch.randn(512, 512)).sum()\n"


def python_out(code: str, tmp_path) -> str:
    """What ``code`` prints in a fresh interpreter (with its own prediction cache); a
    timeout, so that a hang fails."""
    env = {**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_small_points_in_forked_workers_do_not_hang(tmp_path):
    """The parent runs real ops (its OpenMP pool starts), then forks prediction workers that
    run small points for real too: they must not wait for the parent's pool (predict.pool
    starts its workers single-threaded)."""
    code = (OPENMP_STARTED + "from attnprof.profiler.predict.pool import spread\nfrom attnprof.profiler.predict.points import prediction_record\n"
            "from attnprof.profiler.records import Point, Shape\n"
            "points = [Point(v, m, 'model', Shape(seq_len=256, d_model=64, heads=2, layers=2))\n"
            "          for v in ('full', 'sdpa', 'sparse_strided') for m in ('plain', 'checkpoint')]\n"
            "rows = spread(prediction_record, points, workers=2)\n"
            "print(sum(r['predicted_peak_bytes'] > 0 for r in rows))\n")
    assert python_out(code, tmp_path).split() == ["6"]


@pytest.mark.slow
def test_a_budget_search_over_small_points_in_forked_workers_does_not_hang(tmp_path):
    """As above, for the budget search's scheduler (predict/pool.py)."""
    code = (OPENMP_STARTED + "from attnprof.profiler.predict.points import longest_fitting\n"
            "from attnprof.scenarios.scenario import Scenario\n"
            "sc = Scenario(variants=('full', 'sdpa'), modes=('plain', 'checkpoint'), d_model=32, heads=2, layers=2)\n"
            "rows = longest_fitting(sc, 8 << 20, start=64, limit=4096)\n"
            "print(sum(r['longest_fitting_seq_len'] > 0 for r in rows))\n")
    assert python_out(code, tmp_path).split() == ["4"]


def test_the_sweeps_warm_helper_imports_the_fake_tensor_machinery_for_its_points(tmp_path):
    """preload.warm_up runs a small point for real (no fake machinery) and then a tiny fake
    one, so the points it forks predict without importing sympy and torch's fake kernels; on a
    CUDA build it leaves the fake run out (it started CUDA's driver on the H200: docs/gpu.md)."""
    from attnprof.profiler.forks import cuda_compiled

    code = ("import sys\nfrom attnprof.profiler.runner.preload import warm_up\nwarm_up()\n"
            "print(sorted(m for m in ('sympy', 'torch.fx.experimental.symbolic_shapes') if m in sys.modules))\n")
    warmed = "[]" if cuda_compiled() else "['sympy', 'torch.fx.experimental.symbolic_shapes']"
    assert python_out(code, tmp_path).split("\n")[0] == warmed
