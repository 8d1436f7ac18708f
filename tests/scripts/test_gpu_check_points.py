"""scripts/gpu_check_points.py: the GPU check's point stages read back from their run folders."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from attnprof.profiler.predict.measured_gpu import load_measured
from attnprof.profiler.records import Point, PointRecord, Shape

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check_points.py"


@pytest.fixture(scope="module")
def points():
    spec = importlib.util.spec_from_file_location("gpu_check_points", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def record(variant="sdpa", n=256, kv_heads=0, **outcome) -> dict:
    shape = Shape(seq_len=n, batch=1, d_model=64, heads=2, layers=1, dtype="bfloat16", kv_heads=kv_heads)
    return PointRecord.for_point(Point(variant, "plain", "model", shape), **outcome).to_row()


def test_the_commonest_failure_is_named_by_its_first_line(points):
    cuda = "AcceleratorError: CUDA error: initialization error\nSearch for `cudaErrorInitializationError'"
    records = [record(status="error", reason=cuda), record(n=512, status="error", reason=cuda),
               record(n=1024, status="error", reason="AssertionError: sdpa_flop_count"),
               record(n=2048, status="ok"), record(n=4096, status="skipped", reason="too large")]
    line, code = points.status_line(records)
    assert code == 1
    assert line.startswith("5 points (3 error, 1 ok, 1 skipped)")
    assert "commonest failure (2 of 3): AcceleratorError: CUDA error: initialization error" in line
    assert "Search for" not in line


def test_skipped_points_fail_nothing_but_no_ok_point_does(points):
    line, code = points.status_line([record(status="ok"), record(n=512, status="skipped", reason="too large for it")])
    assert code == 0 and "skipped: too large for it" in line
    assert points.status_line([record(status="skipped", reason="too large")])[1] == 1
    assert points.status_line([])[1] == 1


def test_seconds_per_point_and_the_full_sweep_labelled_as_extrapolated(points, tmp_path, capsys):
    run = write_run(tmp_path / "run", [record(n=n, status="ok", point_wall_s=2.5) for n in (256, 512, 1024)])
    assert points.seconds(run, 30.0, 189) == 0
    headline = [line for line in capsys.readouterr().out.splitlines() if line.startswith("HEADLINE: ")][-1]
    assert "3 points of sdpa (3 ok) in 30.0 s: 10.00 s/point" in headline
    assert "7.5 s inside workers (median 2.50 s a point)" in headline
    assert "189 points at this pace: 31.5 min (extrapolated from this slice, not measured)" in headline


def test_seconds_says_where_a_points_seconds_went(points, tmp_path, capsys):
    """Issue 38 item 4: the worker's phases (median over the slice) and the timed share of its timing pass."""
    phases = [{"start": 0.1, "predict": 0.0, "cuda_context": 0.4, "memory_pass": 1.0, "timing_pass": 2.0},
              {"start": 0.3, "predict": 0.2, "cuda_context": 0.6, "memory_pass": 3.0, "timing_pass": 4.0}]
    records = [record(n=256 << i, status="ok", point_wall_s=4.0, point_phases_s=p,
                      time_fwd_samples_ms=[100.0, 100.0], time_bwd_samples_ms=[200.0 * (i + 1)] * 2)
               for i, p in enumerate(phases)]
    assert points.seconds(write_run(tmp_path / "run", records), 10.0, 189) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ("median start 0.20 s, predict 0.10 s, cuda_context 0.50 s, memory_pass 2.00 s, timing_pass 3.00 s, "
            "of which timed 0.80 s;") in lines[-1]
    assert lines[0].endswith("(start 0.10 s, predict 0.00 s, cuda_context 0.40 s, memory_pass 1.00 s, "
                             "timing_pass 2.00 s, of which timed 0.60 s)")


def cuda_record(kv_heads: int) -> dict:
    return record(kv_heads=kv_heads, status="ok", device="cuda", device_name="NVIDIA H200",
                  measured_peak_bytes=10_000_000, measured_by="cuda-allocator", cuda_reserved_peak_bytes=20_971_520,
                  nvml_process_peak_bytes=600_000_000, time_fwd_ms=0.5, time_bwd_ms=1.0,
                  gpu_sdpa_backend_measured="cudnn")


def test_gpu_points_against_the_models_with_their_whole_shape(points, tmp_path, capsys):
    run = write_run(tmp_path / "sweep", [cuda_record(0), cuda_record(1), record(n=512, status="error", reason="x")])
    out_csv, out_json = tmp_path / "m.csv", tmp_path / "m.json"
    assert points.models([run, tmp_path / "never-ran"], out_csv, out_json, "", dry_run=False) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 2  # the error point is not a measurement
    for row in rows:
        assert float(row["allocated_ratio"]) == pytest.approx(10_000_000 / int(row["allocated_model_bytes"]))
        assert float(row["time_ratio"]) == pytest.approx(1.5 / float(row["time_model_ms"]))
    # grouped KV heads are modelled as such: one K/V head holds less than two
    assert int(rows[1]["allocated_model_bytes"]) < int(rows[0]["allocated_model_bytes"])
    assert "kv_heads=1" in rows[1]["point"]
    assert "HEADLINE: 2 GPU points, measured/model on h200: allocated median" in capsys.readouterr().out
    env, measured = load_measured(out_json)  # the file reads back as GPU measurements
    assert env["gpu_table_key"] == "h200" and [m.allocated_peak_bytes for m in measured] == [10_000_000] * 2
    assert json.loads(out_json.read_text())["points"][1]["kv_heads"] == 1


def test_the_dry_run_models_its_cpu_points_but_prints_and_writes_no_ratio(points, tmp_path, capsys):
    cpu = record(status="ok", device="cpu", measured_peak_bytes=1_000_000, measured_by="tensor-tracker")
    run = write_run(tmp_path / "sweep", [cpu])
    out_csv, out_json = tmp_path / "m.csv", tmp_path / "m.json"
    assert points.models([run], out_csv, out_json, "", dry_run=True) == 0
    (row,) = list(csv.DictReader(out_csv.open()))
    assert row["allocated_model_bytes"] and not row["allocated_ratio"] and not row["allocated_measured_bytes"]
    assert "no ratio" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["what"].startswith("DRY RUN on a CPU")


def test_a_gpu_the_table_does_not_know_is_said_not_guessed(points, tmp_path, capsys):
    unknown = {**cuda_record(0), "device_name": "Some Future GPU"}
    run = write_run(tmp_path / "sweep", [unknown])
    assert points.models([run], tmp_path / "m.csv", tmp_path / "m.json", "", dry_run=False) == 1
    assert "no GPU table entry is named 'Some Future GPU'" in capsys.readouterr().out
