"""A gate that cannot read a record must not pass by accident: an invalid record in the
run or the baseline is exit 2 naming file and line; ``--skip-invalid`` leaves it out
explicitly, and then every summary says how many were skipped. The gate's own output
files are never written through a planted link."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.gate import update_baseline

from test_gate import make_run

runner = CliRunner()
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.fixture
def sides(tmp_path):
    run = make_run(tmp_path / "run")
    baseline = tmp_path / "baseline.json"
    update_baseline(baseline, run)
    return run, baseline


def spoil_run(run, bad: str) -> int:
    """Put a bad line after the first record of results.jsonl; its line number."""
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(lines[:1] + [bad] + lines[1:]) + "\n")
    return 2


def bad_lines(run) -> dict:
    first = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    return {"seq_len null": json.dumps({**first, "seq_len": None}),
            "variant a list": json.dumps({**first, "variant": ["full"]}),
            "200k deep": DEEP, "a number": "5",
            "negative peak": json.dumps({**first, "seq_len": 1024, "measured_peak_bytes": -5})}


@pytest.mark.parametrize("case", ["seq_len null", "variant a list", "200k deep", "a number", "negative peak"])
def test_an_invalid_run_record_is_not_comparable_unless_skipped(sides, case):
    run, baseline = sides
    spoil_run(run, bad_lines(run)[case])
    result = runner.invoke(app, ["gate", "--baseline", str(baseline), str(run)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert f"{run / 'results.jsonl'} line 2" in result.stderr and "--skip-invalid" in result.stderr
    result = runner.invoke(app, ["gate", "--baseline", str(baseline), str(run), "--skip-invalid",
                                 "--json-out", str(run / "gate.json")])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "PASS" in result.stdout and "1 invalid record(s) skipped (--skip-invalid)" in result.stdout
    assert f"{run / 'results.jsonl'} line 2" in result.stdout
    assert json.loads((run / "gate.json").read_text())["skipped_invalid"][0].startswith(str(run / "results.jsonl"))


def test_an_invalid_baseline_point_is_not_comparable_unless_skipped(sides, tmp_path):
    run, baseline = sides
    text = baseline.read_text().replace('"seq_len": 512', '"seq_len": "512"', 1)
    baseline.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if '"seq_len": "512"' in t)
    gated = api.gate(run, baseline=baseline, allow_missing=True)
    assert gated.exit_code == 2 and len(gated.lines) == 1
    assert f"{baseline} point 1 (line {line})" in gated.lines[0] and "--skip-invalid" in gated.lines[0]
    md = tmp_path / "summary.md"
    gated = api.gate(run, baseline=baseline, allow_missing=True, skip_invalid=True, markdown=md)
    assert gated.exit_code == 0, gated.lines
    assert "1 invalid record(s) skipped" in "\n".join(gated.lines)
    assert "1 invalid record(s) skipped" in md.read_text()


def test_update_refuses_an_invalid_run_record_unless_skipped(sides, tmp_path):
    run, _ = sides
    spoil_run(run, "5")
    fresh = tmp_path / "fresh.json"
    assert api.gate(run, baseline=fresh, update=True).exit_code == 2 and not fresh.exists()
    gated = api.gate(run, baseline=fresh, update=True, skip_invalid=True)
    assert gated.exit_code == 0 and "1 invalid record(s) skipped" in gated.lines[0]
    assert json.loads(fresh.read_text())["skipped_invalid"] == 1


def test_gate_output_files_are_never_written_through_a_planted_link(sides, tmp_path):
    run, baseline = sides
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    (run / "gate.json").symlink_to(target)
    gated = api.gate(run, baseline=baseline, json_out=run / "gate.json")
    assert gated.exit_code == 2 and "symbolic link" in gated.lines[-1]
    assert target.read_text() == "precious\n"


def test_a_baseline_that_is_a_fifo_or_too_large_is_one_line_not_a_hang(sides, tmp_path, monkeypatch):
    from attnprof.profiler.gate import baseline as baseline_file

    run, baseline = sides
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    gated = api.gate(run, baseline=fifo)
    assert gated.exit_code == 2 and len(gated.lines) == 1, gated.lines
    monkeypatch.setattr(baseline_file, "MAX_BASELINE_BYTES", 16)
    gated = api.gate(run, baseline=baseline)
    assert gated.exit_code == 2 and "larger than" in gated.lines[0], gated.lines
    linked = tmp_path / "linked.json"  # the user's own baseline may be a link: followed
    linked.symlink_to(baseline)
    monkeypatch.undo()
    assert api.gate(run, baseline=linked).exit_code == 0
