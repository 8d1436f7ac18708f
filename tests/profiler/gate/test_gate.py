"""Tests of the CI memory gate (attnprof.profiler.gate) on tiny synthetic run folders:
records written with append_record, a manifest.json beside them, no torch work."""

import json
import re
from pathlib import Path

import pytest

from attnprof.profiler.gate import (GateError, compare, format_markdown, format_table, parse_bytes,
                                    parse_tolerance, result_to_json, run_gate, update_baseline)
from attnprof.profiler.gate.baseline import point_of_record
from attnprof.profiler.records import IDENTITY_FIELDS, PointRecord, key_of_record

from helpers_gate import LENGTHS, LSH, MiB, VARIANTS, make_run, peak


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture
def baseline(tmp_path, run):
    path = tmp_path / "ci" / "baseline.json"
    update_baseline(path, run)
    return path


def edit_baseline(path: Path, variant: str, n: int, **values) -> None:
    doc = json.loads(path.read_text())
    (point,) = [p for p in doc["points"] if p["variant"] == variant and p["seq_len"] == n]
    point.update(values)
    path.write_text(json.dumps(doc))


def gate(baseline, run, **kwargs):
    lines = []
    code = run_gate(baseline, run, out=lines.append, **kwargs)
    return code, "\n".join(lines)


def assert_error(baseline, run, fragment, **kwargs):
    """Exit 2, exactly one line `error: ...` naming the cause; compare() raises GateError."""
    code, text = gate(baseline, run, **kwargs)
    assert code == 2, text
    assert len(text.splitlines()) == 1 and text.startswith("error: ") and fragment in text, text
    with pytest.raises(GateError, match=re.escape(fragment)):
        compare(baseline, run, **{k: v for k, v in kwargs.items() if k == "allow_missing"})


IDENTITY_CHANGES = {"variant": "sdpa", "mode": "checkpoint", "scope": "attention", "seq_len": 1024, "batch": 2,
                    "d_model": 128, "heads": 8, "layers": 3, "dtype": "bfloat16", "ff_mult": 2, "ff_chunks": 2,
                    "forward_only": True}
IDENTITY_CHANGES.update({"mlp": "swiglu", "ffn_dim": 48, "norm": "rmsnorm"})  # --- issue 24: block options ---
IDENTITY_CHANGES["autocast"] = "bfloat16"  # issue 24: precision
IDENTITY_CHANGES.update({"optimizer": "adamw", "optimizer_impl": "foreach"})  # issue 24: optimizer
IDENTITY_CHANGES.update({"vocab": 1000, "tie_embeddings": True, "loss_chunks": 4})  # --- issue 24: lm ---
IDENTITY_CHANGES.update({"kv_heads": 2, "rope": True})  # --- issue 24: attention ---


def test_every_identity_field_tells_points_apart(tmp_path, baseline):
    """The gate keys points by records.IDENTITY_FIELDS: a point that differs in any one of
    them is another point (never silently compared with the baseline's), and a baseline
    keeps every one of them."""
    assert set(IDENTITY_CHANGES) == set(IDENTITY_FIELDS)
    for name, value in IDENTITY_CHANGES.items():
        change = {name: value, "head_dim": {"d_model": 32, "heads": 8}.get(name, 16)}  # head_dim = d_model / heads
        other = make_run(tmp_path / f"other-{name}", change={("full", 256): change})
        with pytest.raises(GateError, match="missing from run .*not in the baseline"):
            compare(baseline, other)
        copy = tmp_path / f"{name}.json"
        update_baseline(copy, other)
        assert value in [p[name] for p in json.loads(copy.read_text())["points"]]
        assert compare(copy, other).exit_code == 0


def test_a_record_and_its_gate_point_have_the_same_key():
    record = PointRecord(variant=LSH, mode="plain", scope="model", seq_len=256, batch=2, d_model=64, heads=4,
                         head_dim=16, layers=2, dtype="float32", ff_chunks=2, forward_only=True).to_row()
    assert key_of_record(point_of_record(record)) == key_of_record(record)


def test_same_run_passes(baseline, run):
    code, text = gate(baseline, run)
    assert code == 0, text
    assert "PASS" in text and "REGRESSION" not in text


def test_grown_point_fails_and_is_named(baseline, run):
    old = int(peak(LSH, 512) * 0.9)
    edit_baseline(baseline, LSH, 512, measured_peak_bytes=old)
    code, text = gate(baseline, run)
    assert code == 1, text
    regressed = [line for line in text.splitlines() if "REGRESSION" in line]
    assert len(regressed) == 1 and regressed[0].startswith(f"{LSH} plain n=512")
    assert f"{old} -> {peak(LSH, 512)} bytes" in text and "+11.1%" in text


def test_predicted_alone_can_fail(baseline, run):
    edit_baseline(baseline, "full", 256, predicted_peak_bytes=peak("full", 256) - 2 * MiB)
    result = compare(baseline, run)
    assert [(c.label, c.figure) for c in result.regressions] == [("full plain n=256", "predicted_peak_bytes")]
    assert result.exit_code == 1


def test_tolerance_is_the_larger_of_percent_and_bytes(baseline, run):
    edit_baseline(baseline, "full", 512, measured_peak_bytes=int(peak("full", 512) / 1.015))  # +1.5%: within 2%
    edit_baseline(baseline, LSH, 256, measured_peak_bytes=peak(LSH, 256) - MiB // 2)  # +2.4%, under 1 MiB
    assert compare(baseline, run, abs_tolerance_bytes=MiB).exit_code == 0
    assert compare(baseline, run, abs_tolerance_bytes=0).exit_code == 1  # the 2.4% one now fails
    assert compare(baseline, run, tolerance_pct=1.0, abs_tolerance_bytes=0).exit_code == 1


def test_time_never_gates(tmp_path, baseline):
    slow = make_run(tmp_path / "slow", change={(LSH, 512): {"time_fwd_ms": 50.0, "time_bwd_ms": 90.0}})
    result = compare(baseline, slow)
    assert result.exit_code == 0
    (row,) = [c for c in result.comparisons if c.figure == "time_ms" and c.label == f"{LSH} plain n=512"]
    assert (row.baseline, row.current, row.verdict) == (5.0, 140.0, "info")


def test_improvement_reported_with_update_suggestion(baseline, run):
    edit_baseline(baseline, "full", 512, measured_peak_bytes=int(peak("full", 512) * 1.1))
    code, text = gate(baseline, run)
    assert code == 0, text
    assert "improved" in text and f"attnprof gate --update --baseline {baseline} {run}" in text
    assert "full plain n=512: measured/tensor-tracker" in text


def test_point_that_became_oom_fails(tmp_path, baseline):
    oom = make_run(tmp_path / "oom", change={(LSH, 512): {"status": "oom", "reason": "out of memory",
                                                          "measured_peak_bytes": None, "measured_by": ""}})
    code, text = gate(baseline, oom)
    assert code == 1, text
    assert f"{LSH} plain n=512: status ok -> oom (out of memory)" in text
    predicted = [c for c in compare(baseline, oom).comparisons
                 if c.label == f"{LSH} plain n=512" and c.figure == "predicted_peak_bytes"]
    assert predicted and predicted[0].verdict == "ok"  # still compared for a failed point


def test_option_label_round_trips_verbatim(tmp_path, baseline, run):
    assert {p["variant"] for p in json.loads(baseline.read_text())["points"]} == set(VARIANTS)
    result = compare(baseline, run)
    assert {c.point["variant"] for c in result.comparisons} == set(VARIANTS)
    assert f"{LSH} plain n=256" in format_table(result)
    assert f"`{LSH} plain n=256`" in format_markdown(result)
    assert LSH in {c["point"]["variant"] for c in result_to_json(result)["comparisons"]}


def test_outputs_written(tmp_path, monkeypatch, baseline, run):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    assert gate(baseline, run, markdown_file=md, json_file=js)[0] == 0
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "### attnprof memory gate: PASS" in text
    assert md.read_text() == text[len("earlier step\n"):]
    doc = json.loads(js.read_text())
    assert doc["exit_code"] == 0 and len(doc["comparisons"]) == 3 * len(VARIANTS) * len(LENGTHS)


@pytest.mark.parametrize("where, words", [("missing/gate.json", "does not exist"), ("", "it is a folder"),
                                          ("x" * 300 + ".json", "longer than"),
                                          ("/proc/attnprof-gate.json", "/proc")])  # root's bits pass: probed
def test_an_unwritable_output_is_refused_before_the_table(tmp_path, baseline, run, where, words):
    """Not the table and PASS, then an error: the one line, and no comparison printed."""
    code, text = gate(baseline, run, json_file=tmp_path / where)
    lines = text.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: cannot write --json-out file")
    assert words in lines[0]
    code, text = gate(baseline, run, markdown_file=tmp_path / "missing" / "gate.md")
    lines = text.splitlines()
    assert code == 2 and lines[0].startswith("error: cannot write --markdown file") and len(lines) == 1


def test_error_goes_to_summary_too(tmp_path, monkeypatch, run):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert gate(tmp_path / "nope.json", run)[0] == 2
    assert "ERROR" in summary.read_text() and "baseline not found" in summary.read_text()


def test_update_is_atomic_and_refreshes(tmp_path, baseline):
    edit_baseline(baseline, LSH, 512, measured_peak_bytes=1)
    code, text = gate(baseline, tmp_path / "run", update=True)
    assert code == 0 and "4 points" in text
    assert gate(baseline, tmp_path / "run")[0] == 0
    assert [p.name for p in baseline.parent.iterdir()] == ["baseline.json"]  # no temp file left


@pytest.mark.parametrize("text, fragment", [
    (None, "not valid JSON (truncated"),  # the real file cut in half
    ("", "is empty"),
    ("{not json", "not valid JSON"),
    ('{"format": "something-else", "version": 1}', "is not an attnprof baseline"),
    ("[1, 2]", "is not an attnprof baseline"),
    ('{"format": "attnprof-baseline", "version": 99}', "version 99"),
    ('{"format": "attnprof-baseline", "version": 1, "scenario": {"name": "ci"}, "points": [{"variant": "x"}]}',
     "lacks identity or figure fields"),
])
def test_unreadable_baseline_is_exit_2(baseline, run, text, fragment):
    if text is None:
        text = baseline.read_text()[: len(baseline.read_text()) // 2]
    baseline.write_text(text)
    assert_error(baseline, run, fragment)


def test_binary_garbage_baseline(baseline, run):
    baseline.write_bytes(b"\xff\xfe\x00garbage")
    assert_error(baseline, run, "corrupt")


def test_bad_figure_type_is_exit_2(baseline, run):
    edit_baseline(baseline, "full", 256, measured_peak_bytes="12 MiB")
    assert_error(baseline, run, "must be a byte count")


def test_missing_run_and_results(tmp_path, baseline):
    assert_error(baseline, tmp_path / "absent", "run folder not found")
    (tmp_path / "empty").mkdir()
    assert_error(baseline, tmp_path / "empty", "results.jsonl is missing")


@pytest.mark.parametrize("scenario, fragment", [
    ({"name": "default"}, "name is 'ci' in baseline"),
    ({"d_model": 128}, "d_model is 64 in baseline"),
    ({"dtype": "bfloat16"}, "dtype is 'float32'"),
    ({"scope": "attention"}, "scope"),
])
def test_different_scenario_is_exit_2(tmp_path, baseline, scenario, fragment):
    assert_error(baseline, make_run(tmp_path / "other", scenario=scenario), fragment)


def test_timing_settings_and_dtype_alias_do_not_matter(tmp_path, baseline):
    other = make_run(tmp_path / "other", scenario={"repeats": 9, "source": "/elsewhere/ci.toml", "dtype": "fp32"})
    assert compare(baseline, other).exit_code == 0


def test_missing_points_are_exit_2_unless_allowed(tmp_path, baseline):
    fewer = make_run(tmp_path / "fewer", skip={(LSH, 512)})
    assert_error(baseline, fewer, f"missing from run {fewer}: {LSH} plain n=512")
    code, text = gate(baseline, fewer, allow_missing=True)
    assert code == 0 and f"not in this run: {LSH} plain n=512" in text


def test_new_points_are_exit_2_unless_allowed(tmp_path, run):
    small = tmp_path / "small.json"
    update_baseline(small, make_run(tmp_path / "small", skip={("full", 256)}))
    assert_error(small, run, "not in the baseline: full plain n=256")
    assert gate(small, run, allow_missing=True)[0] == 0


def test_gpu_figures_need_the_same_device_model(tmp_path):
    a100 = tmp_path / "a100.json"
    update_baseline(a100, make_run(tmp_path / "a", device="cuda", device_name="NVIDIA A100-SXM4-80GB"))
    assert compare(a100, make_run(tmp_path / "b", device="cuda", device_name="NVIDIA A100-SXM4-80GB")).exit_code == 0
    assert_error(a100, make_run(tmp_path / "c", device="cuda", device_name="NVIDIA H200"), "device differs")
    assert_error(a100, make_run(tmp_path / "d"), "device differs")  # GPU baseline, CPU run


def test_measured_by_mismatch_is_exit_2(tmp_path, baseline):
    other = make_run(tmp_path / "other", change={("full", 256): {"measured_by": "cuda-allocator"}})
    assert_error(baseline, other, "not comparable")


def test_cli_strings_are_parsed():
    assert parse_tolerance("2%") == parse_tolerance("2") == 2.0
    assert parse_bytes("1MiB") == MiB and parse_bytes("512 KiB") == MiB // 2 and parse_bytes("1000") == 1000
    for bad in ("-1%", "two"):
        with pytest.raises(GateError):
            parse_tolerance(bad)
    with pytest.raises(GateError, match="abs-tolerance"):
        parse_bytes("1 parsec")
