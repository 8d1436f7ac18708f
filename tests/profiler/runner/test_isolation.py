"""Point isolation, the sweep's side (profiler.runner.isolation): a point runs in a worker
forked from one warm helper, so a killed worker is that point's ``crashed`` status, the
next point runs in a fresh worker, and ``close`` leaves no process behind. (The sweep
killed, raced and starved as a user runs it: test_reliability.py.)"""

import os

import psutil
import pytest

from attnprof.profiler.records import Point, Shape
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.isolation import PointRunner, wait_for
from attnprof.profiler.runner.sweep import SweepSettings

POINT = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1))


def settings(hook: str = "") -> SweepSettings:
    return SweepSettings(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook=hook)


def test_wait_for_returns_what_is_ready_by_the_deadline():
    read, write = os.pipe()
    try:
        assert wait_for([read], 0.0, Interrupts()) == []  # a deadline long past: nothing ready, no wait
        os.write(write, b"x")
        assert wait_for([read], 0.0, Interrupts()) == [read]
        assert wait_for([read], float("inf"), Interrupts()) == [read]  # no deadline: returns once one is ready
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.slow
def test_a_killed_worker_is_its_points_crash_and_the_next_point_runs_fresh():
    runner = PointRunner()
    try:
        crashed = runner.run(POINT, settings("sdpa@64=kill"))
        assert crashed["status"] == "crashed" and "SIGKILL" in crashed["reason"]
        helper = runner.helper.pid
        record = runner.run(POINT, settings())
        assert record["status"] == "ok" and record["measured_peak_bytes"] > 0
        assert runner.helper.pid == helper  # one warm helper for every point
        assert record["worker_pid"] != helper
    finally:
        runner.close()
    assert not runner.alive and not psutil.pid_exists(helper)  # killed and reaped
