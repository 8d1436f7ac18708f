"""api/reporting.py: report() and gate(), their refusals and exit codes."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf")])
def test_report_refuses_seconds_that_are_no_duration(tmp_path, seconds):
    with pytest.raises(UserError, match="--seconds must be a finite number of seconds >= 0"):
        api.report(tmp_path, seconds=seconds)


def test_gate_needs_a_run(tmp_path):
    with pytest.raises(api.UsageProblem, match="RUN_DIR"):
        api.gate(baseline=tmp_path / "b.json")


def test_gate_returns_its_exit_code_and_lines(tmp_path):
    run = tmp_path / "run"
    api.sweep(**TINY, device="cpu", out=run, progress=False, report=False)
    baseline = tmp_path / "baseline.json"
    assert api.gate(run, baseline=baseline, update=True).passed
    seen = []
    result = api.gate(run, baseline=baseline, log=seen.append, json_out=tmp_path / "gate.json")
    assert result.exit_code == 0 and result.lines == seen and seen
    assert json.loads((tmp_path / "gate.json").read_text())
    broken = api.gate(tmp_path / "missing", baseline=baseline)
    assert broken.exit_code == 2 and broken.lines[0].startswith("error: ")


def test_gate_run_refuses_an_unwritable_output_before_it_sweeps(tmp_path):
    """gate --run SCENARIO --json-out X: X is refused before the sweep, not after it has run."""
    scenario = tmp_path / "tiny.toml"
    scenario.write_text('name = "tiny"\nvariants = ["sdpa"]\nmodes = ["plain"]\nmin_len = 64\nmax_len = 64\n'
                        'd_model = 32\nheads = 2\nlayers = 1\nrepeats = 1\nwarmup = 0\n')
    with pytest.raises(api.UsageProblem, match="cannot write --json-out file"):
        api.gate(tmp_path / "run", baseline=tmp_path / "b.json", run_scenario=str(scenario),
                 json_out=tmp_path / "missing" / "gate.json")
    assert not (tmp_path / "run").exists()  # nothing swept
    api.gate(tmp_path / "run", baseline=tmp_path / "b.json", run_scenario=str(scenario), update=True)
    assert read_records(tmp_path / "run")  # the same scenario sweeps where the output can be written


def test_gate_tells_its_table_line_by_line_to_the_cli(tmp_path):
    """The CLI's gate prints the table as lines (a one-line echo printed it with literal \\n)."""
    from typer.testing import CliRunner

    from attnprof.cli import app

    run = tmp_path / "run"
    api.sweep(**TINY, device="cpu", out=run, progress=False, report=False)
    baseline = tmp_path / "baseline.json"
    assert api.gate(run, baseline=baseline, update=True).passed
    result = CliRunner().invoke(app, ["gate", str(run), "--baseline", str(baseline)])
    assert result.exit_code == 0 and "\\n" not in result.stdout
    assert len(result.stdout.splitlines()) >= 4 and result.stdout.splitlines()[-1].startswith("PASS")


def test_report_draws_a_named_timeline_point_and_refuses_a_wrong_type(tmp_path):
    from attnprof.profiler.records import PointRecord
    from attnprof.profiler.runner.storage import append_record

    run = tmp_path / "run"
    run.mkdir()
    append_record(run, PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=64, batch=1, d_model=32,
                                   heads=2, head_dim=16, layers=1, dtype="float32", status="ok",
                                   predicted_peak_bytes=1 << 20, measured_peak_bytes=1 << 20))
    path = api.report(run, seconds=0, timeline_points="sdpa plain n=64")  # one label: that one
    assert "sdpa plain n=64 (named)" in path.read_text(encoding="utf-8")
    assert (run / "report-timeline.png").exists()
    with pytest.raises(UserError):
        api.report(run, seconds=0, timeline_points=3)
