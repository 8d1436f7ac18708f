"""A sweep calibrates once, records predicted times next to the measured ones, and uses the
time model before a series has measured points (its ETA and --point-timeout skipping)."""

import pytest

from attnprof.profiler.records import Point, Shape
from attnprof.profiler.runner.estimate import interpolate_s
from attnprof.profiler.runner.progress import Eta
from attnprof.profiler.runner.storage import read_records
from attnprof.profiler.runner.schema import check_record
from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
from attnprof.profiler.timemodel import calibrate
from attnprof.scenarios.scenario import Scenario

TINY = Scenario(name="tiny", variants=("sdpa", "lsh"), modes=("plain",), seq_lens=(128, 256), d_model=32, heads=2,
                layers=1, repeats=2, warmup=0)


def settings(**kw):
    return SweepSettings(**{**dict(device="cpu", warmup=0, repeats=2, point_timeout_s=60.0, test_hook=""), **kw})


def slow_machine(monkeypatch, **figures):
    """A plausible but very slow CPU: the model then predicts long points."""
    from tests.conftest import STUB_CALIBRATION

    def measure(threads=None, budget_s=15.0):
        host, cpu, version, threads = calibrate.describe_machine(threads)
        return calibrate.Calibration(host=host, cpu=cpu, torch_version=version, threads=threads,
                                     **{**STUB_CALIBRATION, **figures})

    monkeypatch.setattr(calibrate, "measure", measure)


@pytest.mark.slow
def test_every_record_carries_predicted_times_next_to_measured_ones(tmp_path, capsys):
    run_sweep(TINY, tmp_path, settings(), show_progress=False)
    records = read_records(tmp_path)
    assert len(records) == 4
    for r in records:
        assert r["status"] == "ok", r["reason"]
        assert r["predicted_time_fwd_ms"] > 0 and r["predicted_time_bwd_ms"] > 0 and r["time_fwd_ms"] > 0
        assert check_record(r)[1] is None
    assert "calibrated this machine" in capsys.readouterr().err  # once, in the sweep's own process


def test_a_failed_calibration_is_one_warning_and_no_predicted_times(tmp_path, monkeypatch, capsys):
    slow_machine(monkeypatch, bandwidth_bytes_per_s=50e12)
    run_sweep(TINY.override(variants=("sdpa",)), tmp_path, settings(), show_progress=False)
    records = read_records(tmp_path)
    assert [r["status"] for r in records] == ["ok", "ok"]
    assert all(r["predicted_time_fwd_ms"] is None and r["predicted_time_bwd_ms"] is None for r in records)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "memory bandwidth" in warnings[0]


def test_the_model_skips_a_point_far_beyond_the_timeout_before_its_series_is_measured(tmp_path, monkeypatch):
    slowest = calibrate.LIMITS["flops_per_s"][0]  # the slowest CPU the calibration takes as plausible
    slow_machine(monkeypatch, gemm_flops_per_s={"float32": slowest}, attention_fwd_flops_per_s={"float32": slowest},
                 attention_bwd_flops_per_s={"float32": slowest}, bandwidth_bytes_per_s=1e6, overhead_fwd_s=1e-2,
                 overhead_bwd_s=1e-2)
    run_sweep(TINY.override(variants=("sdpa",)), tmp_path, settings(point_timeout_s=0.2), show_progress=False)
    first, second = read_records(tmp_path)
    assert first["status"] == "skipped" and "by the time model" in first["reason"]
    assert first["predicted_time_fwd_ms"] > 0.2e3  # the record says what the model predicted
    assert second["status"] == "skipped" and "by the time model" in second["reason"]


def test_a_plausible_model_skips_nothing(tmp_path):
    run_sweep(TINY.override(variants=("sdpa",)), tmp_path, settings(point_timeout_s=60.0), show_progress=False)
    assert [r["status"] for r in read_records(tmp_path)] == ["ok", "ok"]


def test_the_eta_uses_expected_times_before_any_point_finished(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("attnprof.profiler.runner.progress.time.perf_counter", lambda: now[0])
    eta = Eta(total=4)
    assert eta.seconds_left() is None
    eta.expect("a", 10.0)
    eta.expect("b", 30.0)
    assert eta.seconds_left() == pytest.approx(10 + 30 + 2 * 20)  # two points unknown: the mean of the known
    now[0] += 5.0
    assert eta.seconds_left() == pytest.approx(75.0)  # counts down
    eta.finish("a")
    assert eta.seconds_left() == pytest.approx(30 + 2 * 5.0)  # the rest at this run's 5 s per point
    eta.expect("b", None)
    assert eta.seconds_left() == pytest.approx(3 * 5.0)


def test_interpolation_between_the_models_times_is_a_power_law():
    assert interpolate_s([(256, 1.0), (4096, 256.0)], 1024) == pytest.approx(16.0)  # n^2
    assert interpolate_s([(256, 1.0)], 1024) == 1.0
    assert interpolate_s([], 1024) is None


def test_records_with_a_negative_predicted_time_are_refused():
    from attnprof.profiler.records import PointRecord

    row = PointRecord.for_point(Point("sdpa", "plain", "model", Shape(seq_len=64)), predicted_time_fwd_ms=-1.0).to_row()
    assert "predicted_time_fwd_ms" in (check_record(row)[1] or "")
    row["predicted_time_fwd_ms"] = "fast"
    assert "predicted_time_fwd_ms" in (check_record(row)[1] or "")
