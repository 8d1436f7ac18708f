"""Choosing an executor (profiler/runner/executors/__init__.py): the one ``--executor``
names, built without starting anything (no helper forked, Ray not imported) until
``open``; the executor flags' one-line refusals, Ray's missing extra included. (Running
points: test_local.py, test_ray_cluster.py.)"""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from attnprof.profiler.runner.executors import EXECUTORS, Executor, make_executor
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.sweep import SweepError, SweepSettings


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


def settings(**kw) -> SweepSettings:
    base = dict(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook="")
    return SweepSettings(**{**base, **kw})


@pytest.mark.parametrize("kw, message", [
    (dict(parallel=0), "--parallel must be a positive"),
    (dict(ray_address="127.0.0.1:1"), "need --executor ray"),
    (dict(executor="slurm"), "unknown executor"),
    (dict(executor="ray", parallel=2), "--parallel is for --executor local"),
    (dict(ray_cpus_per_point=0), "--ray-cpus-per-point must be a positive"),
])
def test_executor_settings_are_checked_in_one_line(kw, message):
    with pytest.raises(SweepError, match=message):
        settings(**kw)


def test_without_ray_the_ray_executor_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    from attnprof.cli import app

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["sweep", "--variant", "sdpa", "--seq-len", "64", "--device", "cpu",
                                      "--no-report", "--quiet", "--executor", "ray", "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "pip install 'attnprof[ray]'" in lines[0]
    assert not out.exists()  # refused before any folder was made
    from attnprof.profiler.runner.executors.ray_cluster import import_ray

    with pytest.raises(SweepError, match=r"attnprof\[ray\]"):
        import_ray()


def test_the_command_line_starts_without_ray():
    import subprocess

    code = ("import sys, contextlib, io\nimport attnprof.cli\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    attnprof.cli.main(['sweep', '--help'])\n"
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
