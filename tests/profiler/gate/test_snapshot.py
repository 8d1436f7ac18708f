"""One side of the gate's comparison read from a run folder (profiler.gate.snapshot): the
last record of a point wins, invalid lines are refused or skipped and listed, and a point
is named by its label in every message."""

import json

import pytest

from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.snapshot import check_point, point_label, point_of_record, read_run, require_ok_point
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import RESULTS_FILE, append_record

from helpers_gate import LENGTHS, LSH, VARIANTS, make_run, peak


def test_a_run_is_its_scenario_device_and_one_point_per_identity(tmp_path):
    snap = read_run(make_run(tmp_path / "run", device="cuda", device_name="NVIDIA H200"))
    assert snap.scenario["name"] == "ci" and snap.device == "cuda" and snap.device_name == "NVIDIA H200"
    assert len(snap.points) == snap.ok_points == len(VARIANTS) * len(LENGTHS)
    assert {p["variant"] for p in snap.points.values()} == set(VARIANTS)  # the option label verbatim
    assert snap.skipped == []


def test_the_last_record_of_a_point_wins(tmp_path):
    run = make_run(tmp_path / "run")
    again = PointRecord(variant="full", mode="plain", scope="model", seq_len=256, batch=1, d_model=64, heads=4,
                        head_dim=16, layers=2, dtype="float32", device="cpu", status="oom", reason="out of memory",
                        predicted_peak_bytes=peak("full", 256))
    append_record(run, again)
    snap = read_run(run)
    assert len(snap.points) == len(VARIANTS) * len(LENGTHS)
    assert snap.ok_points == len(snap.points) - 1


def test_a_gate_point_is_identity_and_figures_with_the_step_time():
    point = point_of_record({"variant": "full", "mode": "plain", "status": "ok", "measured_peak_bytes": 10,
                             "measured_by": None, "time_fwd_ms": 1.0, "time_bwd_ms": 2.0, "reason": None})
    assert point["time_ms"] == 3.0 and point["measured_by"] == "" and point["reason"] == ""
    assert point["variant"] == "full" and point["predicted_peak_bytes"] is None


def test_labels_name_variant_mode_length_and_only_unusual_batches():
    assert point_label({"variant": LSH, "mode": "plain", "seq_len": 256, "batch": 1}) == f"{LSH} plain n=256"
    assert point_label({"variant": "full", "scope": "attention", "mode": "none", "seq_len": 64, "batch": 4,
                        "forward_only": True}) == "full attention n=64 b=4 fwd-only"
    assert "\x1b" not in point_label({"variant": "evil\x1b[2J", "mode": "plain", "seq_len": 1})


def test_an_invalid_line_is_refused_naming_it_unless_skipped(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / RESULTS_FILE, "a") as f:
        f.write(json.dumps({"variant": "full", "mode": "plain", "seq_len": "long"}) + "\n")
    with pytest.raises(GateError, match=r"line 5.*--skip-invalid"):
        read_run(run)
    snap = read_run(run, skip_invalid=True)
    assert len(snap.skipped) == 1 and "line 5" in snap.skipped[0]
    assert len(snap.points) == len(VARIANTS) * len(LENGTHS)


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p, "run folder not found"),
    (lambda p: p.mkdir() or p, f"{RESULTS_FILE} is missing"),
])
def test_a_missing_folder_or_results_file_is_one_gate_error(tmp_path, make, fragment):
    with pytest.raises(GateError, match=fragment):
        read_run(make(tmp_path / "run"))


def test_a_run_without_a_scenario_in_its_manifest_is_refused(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "manifest.json").write_text(json.dumps({"environment": {}}))
    with pytest.raises(GateError, match="names no scenario"):
        read_run(run)


def test_a_point_with_a_time_that_is_not_a_finite_number_is_refused():
    with pytest.raises(GateError, match=r"where: point .*time_ms must be a finite number"):
        check_point({"variant": "full", "mode": "plain", "scope": "model", "seq_len": 256, "batch": 1, "d_model": 64,
                     "heads": 4, "head_dim": 16, "layers": 2, "dtype": "float32", "status": "ok",
                     "measured_peak_bytes": 1, "predicted_peak_bytes": 1, "measured_by": "", "time_ms": float("inf")},
                    "where")


def test_a_side_with_no_ok_point_can_neither_pass_nor_become_a_baseline(tmp_path):
    change = {(v, n): {"status": "oom", "measured_peak_bytes": None, "time_fwd_ms": None, "time_bwd_ms": None,
                       "measured_by": ""} for v in VARIANTS for n in LENGTHS}
    snap = read_run(make_run(tmp_path / "run", change=change))
    assert snap.ok_points == 0
    with pytest.raises(GateError, match="has no ok point"):
        require_ok_point(snap, "run")
