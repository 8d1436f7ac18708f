"""``api.export`` and ``attnprof export``: a run folder made here (as a sweep writes it) exported
to stdout or a file; a hostile run folder (invalid lines, a planted link at --out, a FIFO
for results) handled in one line; Parquet without pyarrow is one line, exit 2."""

from __future__ import annotations

import csv
import io
import json
import os
import sys

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import RESULTS_FILE, append_record
from attnprof.profiler.safeio import LinkRefused

runner = CliRunner()


def record(n: int, variant: str = "sdpa", **kw) -> PointRecord:
    figures = {"predicted_peak_bytes": 1000 * n, "measured_peak_bytes": 1000 * n, "measured_by": "tensor-tracker",
               "time_fwd_ms": n / 100, "time_bwd_ms": n / 50, **kw}
    return PointRecord(variant=variant, mode="plain", scope="model", seq_len=n, batch=1, d_model=64, heads=2,
                       head_dim=32, layers=1, dtype="float32", **figures)


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for n in (256, 512):
        append_record(folder, record(n))
    append_record(folder, record(1024, status="oom", reason="out of memory", measured_peak_bytes=None))
    return folder


def spoil(folder, *lines: bytes) -> None:
    with open(folder / RESULTS_FILE, "ab") as fh:
        for line in lines:
            fh.write(line + b"\n")


def test_csv_to_stdout_round_trips(run):
    result = runner.invoke(app, ["export", str(run), "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [int(r["seq_len"]) for r in rows] == [256, 512, 1024]
    assert [r["measured_peak_bytes"] for r in rows] == ["256000", "512000", ""]
    assert [r["status"] for r in rows] == ["ok", "ok", "oom"]


def test_json_and_benchmark_action_to_a_file(run, tmp_path):
    out = tmp_path / "bench.json"
    result = runner.invoke(app, ["export", str(run), "--format", "benchmark-action", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and "2 record" not in result.stderr and "3 record(s)" in result.stderr
    doc = json.loads(out.read_text())
    peaks = {e["name"]: e["value"] for e in doc if e["name"].endswith(": peak memory")}
    assert sorted(peaks.values()) == [256000, 512000]
    rows = json.loads(api.export(run, format="json").data)
    assert [r["predicted_peak_bytes"] for r in rows] == [256000, 512000, 1024000]


def test_the_last_record_of_a_point_wins(run):
    append_record(run, record(256, measured_peak_bytes=7))
    rows = json.loads(api.export(run, format="json").data)
    assert [(r["seq_len"], r["measured_peak_bytes"]) for r in rows] == [(512, 512000), (1024, None), (256, 7)]


def test_invalid_lines_are_skipped_and_said_in_one_line(run):
    spoil(run, b"{not json", b'{"variant": 3}', json.dumps({**record(64).to_row(), "time_fwd_ms": float("nan")})
          .encode())
    lines = []
    done = api.export(run, format="csv", log=lines.append)
    assert done.records == 3 and done.skipped == 3
    assert len(lines) == 1 and "skipped 3 invalid record(s)" in lines[0] and "line 4, 5, 6" in lines[0]
    assert "line 4: not valid JSON" in lines[0]
    result = runner.invoke(app, ["export", str(run)])
    assert result.exit_code == 0 and result.stderr.count("\n") == 1
    assert "NaN" not in result.stdout


def test_a_non_finite_figure_is_an_invalid_record(run):
    spoil(run, json.dumps({**record(64).to_row(), "time_fwd_ms": float("inf")}).encode())
    lines = []
    rows = json.loads(api.export(run, format="json", log=lines.append).data)
    assert 64 not in [r["seq_len"] for r in rows]
    assert "line 4: time_fwd_ms inf is not a finite number" in lines[0]


def test_a_link_planted_at_out_is_never_written_through(run, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    out = run / "export.csv"
    os.symlink(victim, out)
    with pytest.raises(LinkRefused):
        api.export(run, format="csv", out=out)
    result = runner.invoke(app, ["export", str(run), "--out", str(out)])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert victim.read_text() == "keep me" and os.path.islink(out)


@pytest.mark.parametrize("name", [RESULTS_FILE, "report.html", "report-memory.png", "report-predictions.json"])
def test_out_may_not_replace_the_runs_own_files(run, name):
    """The sweep's files and the report's: `--out RUN/report.html` wrote CSV over the report."""
    (run / name).write_bytes(b"keep") if not (run / name).exists() else None
    before = (run / name).read_bytes()
    result = runner.invoke(app, ["export", str(run), "--out", str(run / name)])
    assert result.exit_code == 2 and "own files" in result.stderr
    assert (run / name).read_bytes() == before


def test_a_fifo_for_results_is_refused_not_waited_on(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    os.mkfifo(folder / RESULTS_FILE)
    result = runner.invoke(app, ["export", str(folder)])
    assert result.exit_code == 2 and "not a regular file" in result.stderr


@pytest.mark.parametrize("args, words", [
    (["--format", "xml"], "unknown export format"),
    (["--format", "parquet"], "give --out FILE"),
])
def test_usage_mistakes_are_one_line(run, args, words):
    result = runner.invoke(app, ["export", str(run), *args])
    assert result.exit_code == 2 and words in result.stderr and result.stderr.count("\n") == 1


def test_missing_folder_or_no_valid_record(tmp_path):
    assert "not found" in runner.invoke(app, ["export", str(tmp_path / "nope")]).stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / RESULTS_FILE).write_text("garbage\n")
    result = runner.invoke(app, ["export", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no valid record" in result.stderr


def test_parquet_without_pyarrow_is_one_line_exit_2(run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "x.parquet"
    result = runner.invoke(app, ["export", str(run), "--format", "parquet", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "pyarrow" in result.stderr and "attnprof[parquet]" in result.stderr
    assert not out.exists()


def test_a_gpu_types_folder_exports_every_type(tmp_path):
    top = tmp_path / "types"
    for name, n in (("H100", 256), ("A100", 512)):
        (top / name).mkdir(parents=True)
        append_record(top / name, record(n))
    (top / "gpu-types.json").write_text(json.dumps({"gpu_types": {"H100": "H100", "A100": "A100"}}))
    rows = json.loads(api.export(top, format="json").data)
    assert [(r["gpu_type"], r["seq_len"]) for r in rows] == [("H100", 256), ("A100", 512)]


def test_an_out_name_too_long_and_a_path_with_control_bytes_are_one_line(run, tmp_path):
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / ("x" * 300 + ".csv"))])
    assert result.exit_code == 2 and result.stderr.startswith("error: cannot write --out") and "longer than" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    result = runner.invoke(app, ["export", str(run), "--out", "/proc/attnprof.csv"])  # root's bits pass: probed
    assert result.exit_code == 2 and result.stderr.startswith("error: cannot write --out /proc") and not result.stdout
    out = tmp_path / "bell\a\r.csv"
    result = runner.invoke(app, ["export", str(run), "--out", str(out)])
    assert result.exit_code == 0 and out.is_file()
    assert "\a" not in result.stderr and "\r" not in result.stderr and "bell\\x07\\r.csv" in result.stderr
