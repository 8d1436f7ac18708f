"""The gate's result for people and tools (profiler.gate.format): PASS or FAIL with the
count, the table's columns, each regression spelled out in exact bytes, the update
command quoted for a shell, and JSON with every comparison."""

from attnprof.profiler.gate.compare import Comparison, GateResult
from attnprof.profiler.gate.format import (HEADER, RESULT_FORMAT, detail, error_to_json, format_table, headline,
                                           result_to_json, summary_line, update_hint, value_text)

MiB = 1 << 20
POINT = {"variant": "lsh[n_hashes=8]", "mode": "plain", "seq_len": 256}


def comparison(figure, old, new, verdict, **kw):
    return Comparison(POINT, "lsh[n_hashes=8] plain n=256", figure, old, new, verdict, **kw)


def result(*comparisons, **kw):
    base = dict(baseline_path="ci/base line.json", run_dir="runs/ci", scenario="ci", device="cpu",
                device_name="Test CPU", tolerance_pct=2.0, abs_tolerance_bytes=64 * 1024, points_compared=4)
    return GateResult(**{**base, **kw}, comparisons=list(comparisons))


GREW = comparison("predicted_peak_bytes", 10 * MiB, 12 * MiB, "regression", change_pct=20.0, margin_bytes=0.2 * MiB)
SHRANK = comparison("measured_peak_bytes", 10 * MiB, 5 * MiB, "improved", change_pct=-50.0, margin_bytes=0.2 * MiB,
                    method="tensor-tracker")
SAME = comparison("time_ms", 3.0, 3.1, "same")


def test_the_headline_is_pass_or_fail_with_the_counts():
    assert headline(result(SAME)) == "PASS: 4 point(s) compared, all within tolerance"
    assert headline(result(GREW, SAME)) == "FAIL: 1 regression(s) in 1 of 4 points compared"
    line = summary_line(result(SAME))
    assert "scenario 'ci'" in line and "cpu Test CPU" in line and "tolerance" in line and "\n" not in line


def test_values_are_bytes_times_statuses_or_a_dash():
    assert value_text("predicted_peak_bytes", 10 * MiB) == "10.00 MiB"
    assert value_text("status", "oom") == "oom"
    assert value_text("measured_peak_bytes", None) == "-"
    assert value_text("time_ms", 3.0).endswith("ms")


def test_a_regression_is_spelled_out_in_exact_bytes():
    text = detail(GREW)
    assert text.startswith("lsh[n_hashes=8] plain n=256: predicted 10.00 MiB -> 12.00 MiB")
    assert f"{10 * MiB} -> {12 * MiB} bytes" in text and "allowed margin" in text
    status = comparison("status", "ok", "oom", "regression", note="out of memory")
    assert detail(status) == "lsh[n_hashes=8] plain n=256: status ok -> oom (out of memory)"


def test_the_table_has_its_header_a_row_per_comparison_and_the_notes():
    text = format_table(result(GREW, SHRANK, SAME))
    lines = text.splitlines()
    assert lines[0].split() == list(HEADER)
    assert "REGRESSION" in lines[1] and "measured/tensor-tracker" in lines[2] and "improved" in lines[2]
    assert "regressed:" in text and "improved beyond tolerance (1)" in text
    assert update_hint(result()) in text


def test_the_update_command_quotes_its_paths_for_a_shell():
    assert update_hint(result()) == "attnprof gate --update --baseline 'ci/base line.json' runs/ci"


def test_json_holds_every_comparison_and_the_verdict():
    doc = result_to_json(result(GREW, SAME))
    assert doc["format"] == RESULT_FORMAT and doc["exit_code"] == 1 and doc["verdict"] == "fail"
    assert doc["regressions"] == 1 and doc["improvements"] == 0 and len(doc["comparisons"]) == 2
    assert doc["comparisons"][0]["current"] == 12 * MiB
    assert result_to_json(result(SAME))["verdict"] == "pass"
    assert error_to_json("bad") == {"format": RESULT_FORMAT, "version": 1, "exit_code": 2, "verdict": "error",
                                    "error": "bad"}
