"""The gate on hostile input: tolerances that would pass anything, runs that compare
nothing, files that are not what they claim. Never a silent pass, never a traceback."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnprof.profiler.gate import GateError, compare, update_baseline
from attnprof.profiler.gate.verdict import Tolerance

from test_gate import LSH, assert_error, gate, make_run

DEEP = "[" * 200_000 + "]" * 200_000  # json.loads: RecursionError


def one_error_line(code: int, text: str, fragment: str = "") -> None:
    assert code == 2, text
    assert len(text.splitlines()) == 1 and text.startswith("error: ") and fragment in text, text


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture
def baseline(tmp_path, run):
    path = tmp_path / "baseline.json"
    update_baseline(path, run)
    return path


# --- tolerances -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {"tolerance_pct": "nan"}, {"tolerance_pct": "NaN%"}, {"tolerance_pct": "inf"}, {"tolerance_pct": "-inf%"},
    {"tolerance_pct": float("nan")}, {"tolerance_pct": float("inf")}, {"tolerance_pct": "-1%"},
    {"tolerance_pct": -0.5}, {"abs_tolerance_bytes": "-1"}, {"abs_tolerance_bytes": -1},
    {"abs_tolerance_bytes": "inf"}, {"abs_tolerance_bytes": float("nan")}, {"abs_tolerance_bytes": "NaN"},
])
def test_non_finite_or_negative_tolerances_are_refused(baseline, run, kwargs):
    one_error_line(*gate(baseline, run, **kwargs), "tolerance")


def test_a_refused_argument_writes_no_summary(baseline, run, tmp_path):
    """Refusals before any output: --markdown and --json-out were written with the error verdict
    of a NaN tolerance (and, with an unwritable --json-out, --markdown still was)."""
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    one_error_line(*gate(baseline, run, tolerance_pct="nan", markdown_file=md, json_file=js), "tolerance")
    one_error_line(*gate(baseline, run, markdown_file=md, json_file=tmp_path / "no" / "such" / "x.json"))
    assert not md.exists() and not js.exists()
    one_error_line(*gate(tmp_path / "absent.json", run, markdown_file=md, json_file=js), "baseline not found")
    assert "ERROR" in md.read_text() and json.loads(js.read_text())["verdict"] == "error"  # not comparable: said there


@pytest.mark.parametrize("pct, floor", [(math.nan, 0), (math.inf, 0), (-1.0, 0), (2.0, -1), (2.0, math.nan),
                                        (2.0, math.inf), ("2", 0), (True, 0)])
def test_compare_refuses_them_too(baseline, run, pct, floor):
    with pytest.raises(GateError, match="tolerance"):
        compare(baseline, run, tolerance_pct=pct, abs_tolerance_bytes=floor)
    with pytest.raises(GateError):
        Tolerance(pct, floor)


# --- never a pass on nothing ----------------------------------------------------------------
def test_zero_points_compared_is_exit_2_even_with_allow_missing(tmp_path):
    only_full = tmp_path / "full.json"
    update_baseline(only_full, make_run(tmp_path / "a", skip={(LSH, 256), (LSH, 512)}))
    only_lsh = make_run(tmp_path / "b", skip={("full", 256), ("full", 512)})
    one_error_line(*gate(only_full, only_lsh, allow_missing=True), "nothing to compare")
    one_error_line(*gate(only_full, only_lsh), "missing from run")


def test_points_without_a_gated_figure_are_not_compared(tmp_path):
    """Time alone never gates: points with no deterministic memory figure compare nothing."""
    bare = {"predicted_peak_bytes": None, "measured_peak_bytes": None, "measured_by": ""}
    run = make_run(tmp_path / "run", change={(v, n): bare for v in ("full", LSH) for n in (256, 512)})
    path = tmp_path / "b.json"
    update_baseline(path, run)
    one_error_line(*gate(path, run), "nothing to compare")


def all_failed(tmp_path, name):
    failed = {"status": "oom", "reason": "out of memory", "measured_peak_bytes": None, "measured_by": ""}
    return make_run(tmp_path / name, change={(v, n): failed for v in ("full", LSH) for n in (256, 512)})


def test_a_run_with_no_ok_point_cannot_become_a_baseline(tmp_path):
    path = tmp_path / "b.json"
    code, text = gate(path, all_failed(tmp_path, "oom"), update=True)
    one_error_line(code, text, "has no ok point")
    assert not path.exists()


def test_a_baseline_with_no_ok_point_cannot_pass(tmp_path, baseline):
    doc = json.loads(baseline.read_text())
    for point in doc["points"]:
        point.update(status="oom", measured_peak_bytes=None, measured_by="")
    baseline.write_text(json.dumps(doc))
    one_error_line(*gate(baseline, all_failed(tmp_path, "oom")), "has no ok point")


def test_a_run_where_everything_failed_fails_naming_every_point(tmp_path, baseline):
    code, text = gate(baseline, all_failed(tmp_path, "oom"))
    assert code == 1, text
    assert text.count("status ok -> oom") == 4


def test_every_pass_says_how_many_points_were_compared(tmp_path, baseline, run):
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    code, text = gate(baseline, run, markdown_file=md, json_file=js)
    assert code == 0 and "PASS: 4 point(s) compared" in text
    assert "PASS: 4 point(s) compared" in md.read_text()
    assert json.loads(js.read_text())["points_compared"] == 4
    fewer = make_run(tmp_path / "fewer", skip={(LSH, 512)})
    code, text = gate(baseline, fewer, allow_missing=True)
    assert code == 0 and "PASS: 3 point(s) compared" in text


# --- files that are not what they claim -----------------------------------------------------
def record(**change) -> str:
    base = json.loads((make_run_once() / "results.jsonl").read_text().splitlines()[0])
    base.update(change)
    return json.dumps(base)


_ONE_RUN: list = []


def make_run_once() -> Path:
    if not _ONE_RUN:
        import tempfile
        _ONE_RUN.append(make_run(Path(tempfile.mkdtemp(prefix="gate-hostile-")) / "run"))
    return _ONE_RUN[0]


def without(name: str) -> str:
    doc = json.loads(record())
    del doc[name]
    return json.dumps(doc)


BAD_RESULTS = {
    "binary": b"\xff\xfe\x00\x81garbage\n",
    "non-object": b"[1, 2]\n42\n\"text\"\nnull\n",
    "list for a string": (record(variant=["full"]) + "\n").encode(),
    "object for a string": (record(mode={"a": 1}) + "\n").encode(),
    "missing field": (without("seq_len") + "\n").encode(),
    "null seq_len": (record(seq_len=None) + "\n").encode(),
    "string bytes": (record(measured_peak_bytes="12 MiB") + "\n").encode(),
    "unknown status": (record(status="fine") + "\n").encode(),
    "nan time": (record(time_fwd_ms=float("nan")) + "\n").encode(),
    "huge bytes": (record(measured_peak_bytes=10 ** 30) + "\n").encode(),
    "deep nesting": (DEEP + "\n").encode(),
}


@pytest.mark.parametrize("content", BAD_RESULTS.values(), ids=list(BAD_RESULTS))
def test_invalid_results_are_exit_2(tmp_path, baseline, content):
    run = make_run(tmp_path / "bad")
    (run / "results.jsonl").write_bytes(content)
    one_error_line(*gate(baseline, run))
    one_error_line(*gate(tmp_path / "new.json", run, update=True))
    assert not (tmp_path / "new.json").exists()


@pytest.mark.parametrize("manifest", [DEEP, "[1, 2]", '{"scenario": [1]}', '{"scenario": {"name": "ci"}, '
                                      '"environment": {"device": ["cpu"]}}', "\udcff"])
def test_invalid_manifest_is_exit_2(tmp_path, baseline, manifest):
    run = make_run(tmp_path / "bad")
    (run / "manifest.json").write_text(manifest, errors="surrogateescape")
    code, text = gate(baseline, run)
    assert code == 2 and len(text.splitlines()) == 1 and "Traceback" not in text, text


def edit_point(path: Path, **values) -> None:
    doc = json.loads(path.read_text())
    doc["points"][0].update(values)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("values, fragment", [
    ({"variant": ["full"]}, "variant must be a string"),
    ({"seq_len": None}, "seq_len is null"),
    ({"seq_len": "256"}, "seq_len must be a positive integer"),
    ({"forward_only": "no"}, "forward_only must be true or false"),
    ({"status": None}, "status is null"),
    ({"status": "fine"}, "unknown status"),
    ({"measured_by": 3}, "measured_by must be a string"),
    ({"predicted_peak_bytes": -5}, "predicted_peak_bytes must be a byte count"),
    ({"predicted_peak_bytes": 10 ** 30}, "predicted_peak_bytes must be a byte count"),
    ({"time_ms": float("nan")}, "time_ms must be a finite number"),
    ({"time_ms": "5 ms"}, "time_ms must be a finite number"),
])
def test_invalid_baseline_points_are_exit_2(baseline, run, values, fragment):
    edit_point(baseline, **values)
    assert_error(baseline, run, fragment)


@pytest.mark.parametrize("text, fragment", [
    (DEEP, "corrupt"),
    ('{"format": "attnprof-baseline", "version": 1, "scenario": {"name": "ci"}, "points": [[1, 2]]}',
     "lacks identity or figure fields"),
    ('{"format": "attnprof-baseline", "version": 1, "scenario": {"name": "ci"}, "device": ["cpu"], "points": [{}]}',
     "device must be a string"),
    ('{"format": ["x"], "version": 1}', "is not an attnprof baseline"),
    ('{"format": "attnprof-baseline", "version": 1, "scenario": {"name": "ci", "dtype": ["x"]}, "points": []}',
     "holds no points"),
])
def test_invalid_baseline_documents_are_exit_2(baseline, run, text, fragment):
    baseline.write_text(text)
    assert_error(baseline, run, fragment)


def test_an_unhashable_scenario_field_is_not_a_crash(tmp_path, baseline):
    doc = json.loads(baseline.read_text())
    doc["scenario"]["dtype"] = ["float32"]
    baseline.write_text(json.dumps(doc))
    code, text = gate(baseline, make_run(tmp_path / "r"))
    assert code == 2 and "dtype" in text


# --- the command line -----------------------------------------------------------------------
def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "attnprof", "gate", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


@pytest.mark.slow
def test_cli_errors_are_one_line_and_exit_2(tmp_path, baseline, run):
    deep = make_run(tmp_path / "deep")
    (deep / "results.jsonl").write_text(DEEP + "\n")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    nested = tmp_path / "nested.json"
    nested.write_text(DEEP)
    only_lsh = make_run(tmp_path / "lsh", skip={("full", 256), ("full", 512)})
    only_full = tmp_path / "full.json"
    update_baseline(only_full, make_run(tmp_path / "full", skip={(LSH, 256), (LSH, 512)}))
    cases = [("--baseline", baseline, "--tolerance", "NaN%", run), ("--baseline", baseline, "--tolerance", "-2%", run),
             ("--baseline", baseline, "--abs-tolerance", "inf", run), ("--baseline", baseline, deep),
             ("--baseline", binary, run), ("--baseline", nested, run),
             ("--baseline", only_full, "--allow-missing", only_lsh),
             ("--update", "--baseline", tmp_path / "x.json", all_failed(tmp_path, "oom"))]
    for args in cases:
        done = cli(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
    ok = cli("--baseline", baseline, run)
    assert ok.returncode == 0 and re.search(r"PASS: 4 point\(s\) compared", ok.stdout), ok.stdout + ok.stderr
