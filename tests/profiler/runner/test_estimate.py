"""A sweep's use of the time model (profiler/runner/estimate.py): which model its workers
get (this CPU's calibrated rates, a known GPU's table entry, or none), the thread count
the CPU is calibrated with, the predicted times a record carries, and how long a point is
expected to take (its step time, and lengths in between measured ones)."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner.estimate import (MEMORY_PASS_STEPS, POINT_FIXED_S, add_prediction, add_time_fields,
                                               interpolate_s,
                                               point_seconds, predicted_step_ms, rates_for_point,
                                               time_model_settings, timing_threads)

POINT = Point("sdpa", "plain", "model", Shape(seq_len=128, d_model=32, heads=2, layers=1))


def sweep(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{**dict(executor="local", device="cpu", device_name="", threads=None, parallel=None), **kw})


def test_the_timing_pass_threads_are_given_shared_by_parallel_points_or_torchs_default():
    assert timing_threads(sweep(threads=3, parallel=4)) == 3
    assert timing_threads(sweep(parallel=2)) == max(1, (os.cpu_count() or 1) // 2)
    assert timing_threads(sweep(parallel=10 * (os.cpu_count() or 1))) == 1
    assert timing_threads(sweep()) is None and timing_threads(sweep(parallel=1)) is None


def test_a_cpu_sweep_calibrates_once_and_its_workers_get_the_rates():
    said = []
    chosen = time_model_settings(sweep(), warn=said.append)
    assert set(chosen) == {"time_rates"} and chosen["time_rates"]
    assert rates_for_point(chosen, POINT) is not None
    record = PointRecord.for_point(POINT)
    from attnprof.profiler.predict.fake_run import predict

    add_time_fields(record, POINT, predict(POINT).op_costs, chosen)
    assert record.predicted_time_fwd_ms > 0 and record.predicted_time_bwd_ms > 0
    step_ms = predicted_step_ms(POINT, chosen)
    assert step_ms == pytest.approx(record.predicted_time_fwd_ms + record.predicted_time_bwd_ms, rel=1e-3)  # rounded


def test_the_sweeps_process_predicts_built_in_variants_only(tmp_path, monkeypatch):
    """A plug-in's code runs in its point's own process (a crash there costs that point); the
    sweep's process neither estimates its time nor predicts a record it writes for it."""
    import sys

    marker = tmp_path / "core-ran"
    (tmp_path / "estimate_plugin_for_test.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Cls(FullAttention):\n"
        "    def core(self, q, k, v):\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "        return super().core(q, k, v)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "estimate_plugin_for_test", None)  # imported afresh, dropped after
    del sys.modules["estimate_plugin_for_test"]
    chosen = time_model_settings(sweep(), warn=lambda line: None)
    plugin = Point("estimate_plugin_for_test:Cls", "plain", "model", POINT.shape)
    assert predicted_step_ms(plugin, chosen) is None and predicted_step_ms(POINT, chosen) is not None
    settings = SimpleNamespace(device="cpu", for_child=lambda: chosen)
    for point in (plugin, POINT):
        record = PointRecord.for_point(point)
        record.reason = "skipped: why"
        add_prediction(record, point, settings)
        assert record.reason == "skipped: why"
        assert (record.predicted_peak_bytes is None) is (point is plugin)
    assert not marker.exists()  # the plug-in's core never ran here


def test_a_known_gpu_is_costed_on_its_table_entry_and_an_unknown_one_not_at_all():
    said = []
    known = time_model_settings(sweep(device="cuda", device_name="NVIDIA H100 80GB HBM3"), warn=said.append)
    assert known == {"time_gpu": "h100-sxm"} and said == []
    assert rates_for_point(known, POINT) is not None
    assert time_model_settings(sweep(device="cuda", device_name="Imaginary GPU 9000"), warn=said.append) == {}
    assert len(said) == 1 and "Imaginary GPU 9000" in said[0] and "no predicted times" in said[0]


def test_a_ray_sweep_and_a_worker_without_a_model_predict_no_times():
    assert time_model_settings(sweep(executor="ray"), warn=lambda line: pytest.fail(line)) == {}
    assert rates_for_point({}, POINT) is None and predicted_step_ms(POINT, {}) is None
    record = PointRecord.for_point(POINT)
    add_time_fields(record, POINT, [], {})
    assert record.predicted_time_fwd_ms is None and record.predicted_time_bwd_ms is None


def test_a_points_seconds_count_every_step_it_runs():
    assert point_seconds(100.0, {"warmup": 2, "repeats": 5}) == pytest.approx(
        POINT_FIXED_S + (2 + 5 + MEMORY_PASS_STEPS) * 0.1)
    assert point_seconds(0.0, {}) == POINT_FIXED_S


def test_lengths_between_estimates_follow_a_power_law_through_the_nearest_two():
    assert interpolate_s([], 512) is None
    assert interpolate_s([(256, 3.0)], 4096) == 3.0
    quadratic = [(256, 1.0), (512, 4.0), (1024, 16.0)]
    assert interpolate_s(quadratic, 724) == pytest.approx(4.0 * (724 / 512) ** 2)
    assert interpolate_s(quadratic, 2048) == pytest.approx(64.0)  # beyond the last: the last two's slope
    assert interpolate_s(quadratic, 128) == pytest.approx(0.25)  # before the first: the first two's
    assert interpolate_s([(256, 0.0), (512, 4.0)], 384) == 0.0  # no slope through zero
    assert math.isfinite(interpolate_s([(256, 1.0), (256, 2.0)], 512))
