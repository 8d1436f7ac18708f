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


def test_report_refuses_negative_seconds(tmp_path):
    with pytest.raises(api.UsageProblem, match="negative"):
        api.report(tmp_path, seconds=-1)


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
