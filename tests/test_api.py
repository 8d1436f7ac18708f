"""attnprof.api, the library under the CLI: scenarios from keywords, predict, one-call
sweep -> capacity -> report, report, gate, and exit codes of interrupted sweeps."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


def test_keywords_override_the_scenario_file_and_say_so():
    sc = api.build_scenario("ci", variants="sdpa,lsh[n_hashes=4]", modes="plain", max_len=512)
    assert sc.variants == ("sdpa", "lsh[n_hashes=4]") and sc.modes == ("plain",)
    assert (sc.min_len, sc.max_len, sc.d_model) == (256, 512, 64)  # the rest from ci.toml
    assert "[overridden: " in sc.description and "max_len=512" in sc.description


def test_head_dim_sets_d_model_and_excludes_it():
    assert api.build_scenario(heads=8, head_dim=32, variants=["sdpa"]).d_model == 256
    with pytest.raises(api.UsageProblem, match="not both"):
        api.build_scenario(head_dim=32, d_model=256)


@pytest.mark.parametrize("kwargs, message", [
    (dict(seq_lens=[0]), "positive"),
    (dict(repeats=0), "positive"),
    (dict(warmup=-1), "negative"),
    (dict(min_len=4096, max_len=256), "above"),
    (dict(variants=["nope"]), "unknown variant"),
    (dict(dtype="int7"), "unknown dtype"),
])
def test_every_mistake_is_a_user_error(kwargs, message):
    with pytest.raises(UserError, match=message):
        api.build_scenario(**kwargs)


def test_predict_returns_records_and_a_table():
    result = api.predict(variants=["sdpa"], modes=["plain"], seq_lens=[1024], d_model=64, heads=4)
    assert [r["seq_len"] for r in result.records] == [1024] and result.records[0]["predicted_peak_bytes"] > 0
    assert "sdpa" in result.table()


def test_predict_with_a_budget_finds_the_longest_fitting_length():
    result = api.predict(variants="full", modes="plain", d_model=64, heads=4, layers=1, budget="64MiB")
    assert result.budget_bytes == 64 << 20
    assert result.records[0]["predicted_peak_bytes"] <= 64 << 20 < 2 ** 40


def test_predict_refuses_an_unreadable_budget():
    with pytest.raises(UserError, match="cannot parse size"):
        api.predict(budget="lots")


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
    assert run.interrupted and run.exit_code == code
    assert api.SweepRun(tmp_path, Scenario(), "cpu", 1, SimpleNamespace(interrupted=False)).exit_code == 0


def test_capacity_predictions_within_their_budget_fill_the_report_cache(tmp_path):
    """No clock read: a budget of 0 s predicts nothing; a generous one predicts the one
    series of a tiny scenario (how a deadline cuts a long run short is the pool's test)."""
    assert api.capacity_for_report(api.build_scenario("default"), tmp_path, seconds=0) == (0, 0.0)
    sc = api.build_scenario(variants=["sdpa"], scope="attention", min_len=64, max_len=64, d_model=32, heads=2)
    count, took_s = api.capacity_for_report(sc, tmp_path, seconds=600)
    assert count > 0 and took_s >= 0


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
