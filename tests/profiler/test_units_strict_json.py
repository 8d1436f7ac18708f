"""Issue 40, item 1: every output a program reads is strict JSON (RFC 8259 has no NaN or
Infinity): ``units.strict_json`` makes a figure that is not finite null with a reason beside
it, and predict --json, results.jsonl (the sweep's records), export, compare-timelines and
the gate's --json-out all go through it. Each output here is parsed with a parser that
refuses NaN and Infinity."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import RESULTS_FILE, append_record
from attnprof.profiler.units import NULL_REASON, finite_json, strict_json
from attnprof.scenarios.scenario import Scenario

runner = CliRunner()
SMALL = ["--variant", "sdpa", "--mode", "plain", "--seq-len", "256", "--d-model", "32", "--heads", "2",
         "--layers", "1"]


def refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def strict(text: str):
    """What jq or a browser accepts: JSON without NaN, Infinity or -Infinity."""
    return json.loads(text, parse_constant=refuse)


def test_a_figure_that_is_not_finite_is_null_with_a_reason_beside_it():
    doc = {"a": math.inf, "b": [1.5, math.nan], "c": {"d": -math.inf, "e": 2}, "f": True, "g": None, "h": "x"}
    out = strict(strict_json(doc, indent=1))
    assert out == {"a": None, "a" + NULL_REASON: "not a finite number (inf)", "b": [1.5, None],
                   "c": {"d": None, "d" + NULL_REASON: "not a finite number (-inf)", "e": 2},
                   "f": True, "g": None, "h": "x"}
    assert finite_json((1, math.nan)) == [1, None] and finite_json(math.inf) is None
    with pytest.raises(ValueError):
        strict(json.dumps(doc))  # what json.dumps writes by default is not JSON


def record(n: int, **kw) -> PointRecord:
    figures = {"predicted_peak_bytes": 1000 * n, "measured_peak_bytes": 1000 * n, "measured_by": "tensor-tracker",
               "time_fwd_ms": 2.0, "time_bwd_ms": 3.0, "device": "cpu", "device_name": "Test CPU", **kw}
    return PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=n, batch=1, d_model=64, heads=4,
                       head_dim=16, layers=2, dtype="float32", **figures)


@pytest.fixture
def run(tmp_path):
    """A run folder whose records hold figures that are not finite (a timer gone wrong)."""
    folder = tmp_path / "run"
    folder.mkdir()
    manifest = {"scenario": Scenario(name="ci", d_model=64, heads=4, layers=2).to_dict(),
                "environment": {"device": "cpu", "device_name": "Test CPU"}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    append_record(folder, record(256, tokens_per_s=math.inf, achieved_flops_per_s=math.nan))
    append_record(folder, record(512, time_fwd_iqr_ms=math.nan))
    return folder


def test_the_sweeps_records_are_strict_json_and_still_valid_records(run):
    lines = (run / RESULTS_FILE).read_text().splitlines()
    first = strict(lines[0])
    assert first["tokens_per_s"] is None and "inf" in first["tokens_per_s" + NULL_REASON]
    from attnprof.profiler.runner.storage import read_records

    assert len(read_records(run)) == 2  # null is a valid missing figure: the records still read back


def test_export_json_and_benchmark_action_are_strict(run):
    for fmt in ("json", "benchmark-action"):
        result = runner.invoke(app, ["export", str(run), "--format", fmt])
        assert result.exit_code == 0, result.stderr
        strict(result.stdout)


def test_the_gates_json_out_is_strict_when_a_change_is_infinite(run, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert runner.invoke(app, ["gate", "--baseline", str(baseline), str(run), "--update"]).exit_code == 0
    doc = strict(baseline.read_text())
    for point in doc["points"]:
        if "time_ms" in point:
            point["time_ms"] = 5e-324  # a baseline is data: a time this small makes the change infinite
    baseline.write_text(json.dumps(doc))
    out = tmp_path / "gate.json"
    result = runner.invoke(app, ["gate", "--baseline", str(baseline), str(run), "--json-out", str(out)])
    assert result.exit_code in (0, 1), result.output
    gated = strict(out.read_text())
    assert any(c.get("change_pct" + NULL_REASON) for c in gated["comparisons"]), gated["comparisons"]


def test_compare_timelines_json_is_strict(tmp_path):
    result = api.predict(variants=["sdpa"], modes=["plain"], seq_lens=[128], d_model=32, heads=2, layers=1,
                         timeline=tmp_path / "t")
    snap = next(p for p in result.timeline_files if str(p).endswith(".memory.pickle"))
    cli = runner.invoke(app, ["compare-timelines", str(snap), str(snap), "--json"])
    assert cli.exit_code == 0, cli.stderr
    strict(cli.stdout)


def test_predict_json_is_strict(tmp_path):
    result = runner.invoke(app, ["predict", *SMALL, "--json"])
    assert result.exit_code == 0, result.stderr
    assert strict(result.stdout)[0]["predicted_peak_bytes"] > 0
