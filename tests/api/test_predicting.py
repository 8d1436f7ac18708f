"""api/predicting.py: predict() returns records and a table; a budget finds the longest fitting length."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from gpu_samples import TINY_CARD_TOML
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


def test_predict_returns_records_and_a_table():
    result = api.predict(variants=["sdpa"], modes=["plain"], seq_lens=[1024], d_model=64, heads=4)
    assert [r["seq_len"] for r in result.records] == [1024] and result.records[0]["predicted_peak_bytes"] > 0
    assert "sdpa" in result.table()


def test_predict_with_a_budget_finds_the_longest_fitting_length():
    result = api.predict(variants="full", modes="plain", d_model=64, heads=4, layers=1, budget="64MiB")
    assert result.budget_bytes == 64 << 20
    assert result.records[0]["predicted_peak_bytes"] <= 64 << 20 < 2 ** 40


def test_predict_refuses_an_unreadable_budget():
    with pytest.raises(UserError, match="cannot parse size"):
        api.predict(budget="lots")


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    """A plug-in variant whose attention raises (a user's bug): ``broken_attn:Broken``."""
    (tmp_path / "broken_attn.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Broken(FullAttention):\n    description = 'raises'\n    paper = 'me, arXiv 0000.00000'\n"
        "    def core(self, q, k, v):\n        raise ValueError('my variant is broken\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "broken_attn:Broken"


SMALL = dict(modes=["plain"], d_model=32, heads=2, layers=1)


def test_a_prediction_that_raises_is_its_points_error_and_the_others_are_predicted(broken_plugin):
    result = api.predict(variants=[broken_plugin, "full"], seq_lens=[256], **SMALL)
    broken, full = result.records
    assert broken["status"] == "error" and broken["predicted_peak_bytes"] is None
    assert broken["reason"].startswith("ValueError: my variant is broken (at ")
    assert full["status"] == "ok" and full["predicted_peak_bytes"] > 0
    assert result.failed() == f"1 of 2 predictions failed; the first: {broken['reason']}"
    assert "my variant is broken" in result.table()
    assert api.predict(variants=["full"], seq_lens=[256], **SMALL).failed() is None


def test_a_failing_prediction_is_said_on_the_gpu_model_and_in_budget_searches(broken_plugin, monkeypatch):
    gpu = api.predict(variants=[broken_plugin, "full"], seq_lens=[256], gpus=["h100-sxm"], **SMALL)
    assert [r["status"] for r in gpu.records] == ["error", "ok"] and gpu.records[1]["gpu_allocated_peak_bytes"] > 0
    for kwargs in ({}, {"gpus": ["h100-sxm"]}):
        rows = api.predict(variants=[broken_plugin, "full"], budget="1GiB", max_len=1024, **SMALL, **kwargs).records
        assert [r.get("status") for r in rows] == ["error", "ok"], kwargs
        assert rows[0]["limited_by"].startswith("prediction failed: ValueError: my variant is broken")
        assert rows[1]["longest_fitting_seq_len"] == 1024


def test_a_gpu_model_that_raises_for_one_point_leaves_the_others(monkeypatch):
    from attnprof.profiler.predict import gpu_points

    real = gpu_points.predict_gpu

    def fails_for_lsh(point, gpu, cache=None, limit_bytes=None):
        if point.variant.startswith("lsh"):
            raise KeyError("no rule for this op")
        return real(point, gpu, cache, limit_bytes)

    monkeypatch.setattr(gpu_points, "predict_gpu", fails_for_lsh)
    result = api.predict(variants=["lsh", "full"], seq_lens=[256], gpus=["h100-sxm"], **SMALL)
    lsh, full = result.records
    assert lsh["status"] == "ok" and lsh["predicted_peak_bytes"] > 0  # its CPU figures stand
    assert lsh["gpu_status"] == "error" and lsh["gpu_allocated_peak_bytes"] is None
    assert lsh["gpu_note"].startswith("GPU model failed: KeyError: 'no rule for this op'")
    assert full["status"] == "ok" and full["gpu_allocated_peak_bytes"] > 0 and "gpu_status" not in full
    assert result.failed().startswith("1 of 2 predictions failed; the first: h100-sxm: GPU model failed: KeyError")
    table = result.table()  # the CPU table shows lsh's figures; the GPU table's note says why its row is empty
    assert "model note: h100-sxm: GPU model failed: KeyError" in table


def test_a_failure_at_a_length_one_gpus_search_never_asked_for_is_not_that_gpus(tmp_path, monkeypatch):
    """The GPUs of a budget search share their predictions; each row is an error only where its
    own search met the failure."""
    from attnprof.profiler.predict import gpu_points

    real = gpu_points.predict_gpu
    asked = []

    def fails_at_4096(point, gpu, cache=None, limit_bytes=None):
        asked.append((gpu.key, point.shape.seq_len))
        if point.shape.seq_len == 4096:
            raise ValueError("no 4096 for me")
        return real(point, gpu, cache, limit_bytes)

    monkeypatch.setattr(gpu_points, "predict_gpu", fails_at_4096)
    (tmp_path / "tiny.toml").write_text(TINY_CARD_TOML)
    rows = api.predict(variants=["full"], budget="1TiB", max_len=16384, gpus=["tiny", "h100-sxm"],
                       gpu_files=[tmp_path / "tiny.toml"], **SMALL).records
    by_gpu = {r["gpu"]: r for r in rows}
    assert by_gpu["tiny"]["status"] == "error" and "no 4096 for me" in by_gpu["tiny"]["limited_by"]
    assert by_gpu["h100-sxm"]["status"] == "ok" and by_gpu["h100-sxm"]["longest_fitting_seq_len"] == 16384
