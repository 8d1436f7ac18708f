"""api/sweeping.py: one-call sweep -> capacity -> report, a used folder refused, exit codes of interrupted sweeps
and of sweeps in which no point ended ok (issue 38)."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner.storage import append_record, read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


@pytest.mark.slow
def test_a_sweep_ending_in_a_report_is_one_call(tmp_path):
    started = []
    run = api.sweep(**TINY, device="cpu", out=tmp_path / "run", progress=False, capacity_seconds=30,
                    on_start=lambda r: started.append(len(read_records(r.out))))
    assert started == [0]  # on_start came once, before any point
    assert run.exit_code == 0 and not run.interrupted
    assert [r["seq_len"] for r in run.records()] == [64, 128] and all(r["status"] == "ok" for r in run.records())
    assert run.report_path == tmp_path / "run" / "report.html" and run.report_path.exists()
    assert run.capacity_predictions > 0 and run.capacity_s is not None
    assert json.loads((tmp_path / "run" / "report-predictions.json").read_text())


def test_a_sweep_refuses_a_used_folder_before_it_starts(tmp_path):
    api.sweep(**TINY, device="cpu", out=tmp_path / "run", progress=False, report=False)
    started = []
    with pytest.raises(UserError, match="already holds results"):
        api.sweep(**TINY, device="cpu", out=tmp_path / "run", progress=False, on_start=started.append)
    with pytest.raises(UserError, match="cannot resume"):
        api.sweep(**{**TINY, "d_model": 64}, device="cpu", out=tmp_path / "run", resume=True, progress=False,
                  on_start=started.append)
    assert started == []


@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143), (None, 130)])
def test_an_interrupted_sweep_exits_128_plus_the_signal(tmp_path, signum, code):
    summary = SimpleNamespace(interrupted=True)
    if signum is not None:
        summary.interrupted_by = signum
    run = api.SweepRun(tmp_path, Scenario(), "cpu", 1, summary)
    assert run.interrupted and run.exit_code == code and run.failure() is None  # resume completes it


def test_a_finished_sweep_exits_0_with_an_ok_point_and_1_without(tmp_path):
    finished = api.SweepRun(tmp_path, Scenario(), "cpu", 1, SimpleNamespace(interrupted=False))
    point = Point("sdpa", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))
    append_record(tmp_path, PointRecord.for_point(point, status="error", reason="RuntimeError: x (at cli.py:1)"))
    assert finished.exit_code == 1 and finished.failure().endswith("(1 of 1): RuntimeError: x (at cli.py:1)")
    append_record(tmp_path, PointRecord.for_point(replace(point, shape=replace(point.shape, seq_len=128))))
    assert finished.exit_code == 0 and finished.failure() is None
