"""Choosing an executor (profiler/runner/executors/__init__.py): the one ``--executor``
names, built without starting anything (no helper forked, Ray not imported) until
``open``. (Running points: test_parallel.py, test_ray_cluster.py.)"""

from __future__ import annotations

import sys

from attnprof.profiler.runner.executors import EXECUTORS, Executor, make_executor
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.sweep import SweepSettings


def test_each_named_executor_is_built_and_nothing_starts_before_open():
    assert EXECUTORS == ("local", "ray")
    for name in EXECUTORS:
        executor = make_executor(SweepSettings(device="cpu", executor=name), Interrupts())
        assert isinstance(executor, Executor) and executor.name == name
        assert executor.describe()["executor"] == name


def test_building_the_ray_executor_does_not_import_ray():
    had_ray = "ray" in sys.modules  # an earlier test of this process may have imported it
    make_executor(SweepSettings(device="cpu", executor="ray"), Interrupts())
    assert had_ray or "ray" not in sys.modules
