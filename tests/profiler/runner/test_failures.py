"""A failed point says what and where, its traceback goes to RUN/logs, and a sweep in which no
point ended ok exits 1 with one line (profiler/runner/failures.py, issue 38)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner.failures import (TRACEBACK_KEY, failure_reason, keep_traceback, log_path,
                                               no_point_ok, row_of, write_log)
from attnprof.profiler.runner.storage import read_records
from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
from attnprof.scenarios.scenario import Scenario

POINT = Point("sdpa", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))
CUDA_TEXT = ("CUDA error: initialization error\nCUDA kernel errors might be asynchronously reported at some "
             "other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
             "CUDA_LAUNCH_BLOCKING=1")


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the test wants it with its traceback
        return caught


def test_a_kept_traceback_rides_the_row_with_its_causes():
    try:
        try:
            raise ValueError("the cause")
        except ValueError as cause:
            raise RuntimeError(CUDA_TEXT) from cause
    except RuntimeError as exc:
        record = PointRecord(**POINT.identity(), status="error", reason=failure_reason(exc))
        keep_traceback(record, exc)
    row = row_of(record)
    assert "ValueError: the cause" in row[TRACEBACK_KEY] and "CUDA_LAUNCH_BLOCKING=1" in row[TRACEBACK_KEY]
    assert TRACEBACK_KEY not in record.to_row()


def test_the_log_goes_into_the_run_folder_and_the_record_names_it(tmp_path):
    row = {**PointRecord(**POINT.identity(), status="error", reason="RuntimeError: x").to_row(),
           TRACEBACK_KEY: "Traceback (most recent call last):\n  boom\n"}
    out = write_log(tmp_path, POINT, row)
    assert TRACEBACK_KEY not in out and out["error_log"].startswith("logs/") and out["error_log"].endswith(".log")
    text = (tmp_path / out["error_log"]).read_text()
    assert "boom" in text and "reason: RuntimeError: x" in text and POINT.key_text() in text
    assert log_path(tmp_path, POINT) == tmp_path / out["error_log"]


def test_the_log_spells_out_control_characters_of_the_reason_and_the_traceback(tmp_path):
    """`cat RUN/logs/X.log` must not run a plug-in's escape sequence (results.jsonl and the
    terminal spell it out already); the log's own line breaks stay."""
    row = {**PointRecord(**POINT.identity(), status="error", reason="RuntimeError: boom \x1b[31mRED").to_row(),
           TRACEBACK_KEY: "Traceback (most recent call last):\n  RuntimeError: boom \x1b[31mRED\r\n"}
    data = (tmp_path / write_log(tmp_path, POINT, row)["error_log"]).read_bytes()
    assert b"\x1b" not in data and b"\r" not in data
    assert data.count(b"boom \\x1b[31mRED") == 2 and b"\nreason: " in data


def test_an_ok_row_gets_no_log_and_loses_any_stray_traceback(tmp_path):
    row = {**PointRecord(**POINT.identity()).to_row(), TRACEBACK_KEY: "nothing"}
    out = write_log(tmp_path, POINT, row)
    assert TRACEBACK_KEY not in out and out["error_log"] == "" and not (tmp_path / "logs").exists()


def test_a_planted_link_is_never_followed_and_the_record_is_kept(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").symlink_to(outside)
    row = {**PointRecord(**POINT.identity(), status="oom", reason="MemoryError: m").to_row(), TRACEBACK_KEY: "tb"}
    out = write_log(run, POINT, row)
    assert list(outside.iterdir()) == [] and out["error_log"] == ""
    assert out["reason"].startswith("MemoryError: m; traceback not kept: ") and "symbolic link" in out["reason"]


def records(*pairs):
    return [{"status": status, "reason": reason} for status, reason in pairs]


def test_a_sweep_with_one_ok_point_is_no_failure():
    assert no_point_ok(records(("error", "E: a"), ("ok", ""))) is None


def test_no_ok_point_names_the_commonest_reason_its_figures_aside():
    line = no_point_ok(records(("error", "RuntimeError: CUDA error (at profiler/x.py:3)"),
                               ("skipped", "predicted peak 2.0 GiB exceeds the memory limit 1.0 KiB"),
                               ("skipped", "predicted peak 8.0 GiB exceeds the memory limit 1.0 KiB"),
                               ("crashed", "worker killed by SIGKILL")))
    assert "\n" not in line and line.startswith("no point ended ok (2 skipped, 1 error, 1 crashed)")
    assert line.endswith("the commonest reason (2 of 4): predicted peak 2.0 GiB exceeds the memory limit 1.0 KiB")
    assert no_point_ok([]) == "no point ended ok: the sweep recorded no point"


TINY = Scenario(name="tiny", variants=("sdpa",), modes=("plain",), min_len=64, max_len=128,
                d_model=32, heads=2, layers=1, repeats=1, warmup=0)


@pytest.mark.slow
def test_a_failing_point_in_a_sweep_says_where_and_leaves_its_traceback_in_the_run_folder(tmp_path):
    settings = SweepSettings(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook="sdpa@128=error")
    summary = run_sweep(TINY, tmp_path, settings, show_progress=False)
    by_len = {r["seq_len"]: r for r in read_records(tmp_path)}
    assert by_len[64]["status"] == "ok" and by_len[64]["error_log"] == ""
    failed = by_len[128]
    assert failed["status"] == "error"
    assert failed["reason"].startswith("RuntimeError: CUDA error: simulated initialization error (at profiler/runner/")
    log = (tmp_path / failed["error_log"]).read_text()
    assert "Traceback (most recent call last)" in log and "CUDA_LAUNCH_BLOCKING=1" in log
    assert all(TRACEBACK_KEY not in r for r in summary.records)
    assert TRACEBACK_KEY not in (tmp_path / "results.jsonl").read_text()


def cli_sweep(out: Path, hook: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
           "--max-len", "128", "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0",
           "--device", "cpu", "--out", str(out), "--no-report", "--quiet", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "ATTNPROF_TEST_HOOK": hook})


@pytest.mark.slow
def test_an_all_error_sweep_exits_1_with_one_line_and_so_does_an_all_skipped_one(tmp_path):
    done = cli_sweep(tmp_path / "errors", "sdpa=error")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in done.stderr.splitlines() if "Traceback" in line or line.startswith("error:")]
    assert len(errors) == 1 and "no point ended ok (2 error)" in errors[0]
    assert "(2 of 2): RuntimeError: CUDA error: simulated initialization error (at profiler/runner/" in errors[0]
    skipped = cli_sweep(tmp_path / "skipped", "", "--mem-limit", "1KiB")
    assert skipped.returncode == 1 and "no point ended ok (2 skipped)" in skipped.stderr, skipped.stderr


@pytest.mark.slow
def test_a_resumed_sweep_whose_kept_points_were_ok_is_no_failure(tmp_path):
    assert cli_sweep(tmp_path, "").returncode == 0
    again = cli_sweep(tmp_path, "sdpa=error", "--resume")  # nothing left to run: the hook never fires
    assert again.returncode == 0, again.stderr
