"""A run as the report reads it (reports.data): the tidy frame's derived columns, series
labels that keep apart what the run varies, panels and series in order, records checked
before pandas sees them, and a folder that is no run is one ReportError line."""

import pandas as pd
import pytest

from attnprof.profiler.runner.storage import RESULTS_FILE
from attnprof.reports.data import (ReportError, check_records, devices, load, multi_device, one_line, panels,
                                   series_order, skipped_note, tidy)

from conftest import ci_records, synthetic_record, write_run


def test_the_frame_has_a_row_per_point_and_its_derived_columns(tmp_path):
    run = load(write_run(tmp_path / "run", ci_records(variants=("full", "lsh[n_hashes=8]"))))
    frame = run.frame
    assert len(frame) == 2 * 3 * 3 and run.manifest["scenario"]["name"] == "ci" and run.skipped == []
    oom = frame[frame["status"] == "oom"].iloc[0]
    assert not oom["peak_measured"] and oom["peak_bytes"] == oom["predicted_peak_bytes"]
    ok = frame[frame["status"] == "ok"].iloc[0]
    assert ok["peak_measured"] and ok["peak_bytes"] == ok["measured_peak_bytes"]
    assert ok["time_ms"] == pytest.approx(ok["time_fwd_ms"] + ok["time_bwd_ms"])
    assert set(frame["family"]) == {"full", "lsh"} and set(frame["series"]) == {"full", "lsh[n_hashes=8]"}


def test_panels_follow_the_modes_order_and_series_keep_families_together():
    records = [synthetic_record(v, m, 256) for v in ("lsh[n_hashes=8]", "full", "lsh") for m in ("reversible", "plain")]
    records.append(synthetic_record("full", "none", 256, scope="attention"))
    frame = tidy(pd.DataFrame([r.to_row() for r in records]))
    assert panels(frame) == ["plain", "reversible", "attention"]
    assert series_order(frame) == ["lsh", "lsh[n_hashes=8]", "full"]  # first-seen family, then shortest label


def test_a_varied_shape_and_several_devices_are_in_the_series_label():
    rows = [synthetic_record("full", "plain", 256).to_row() for _ in range(3)]
    rows[1]["d_model"], rows[2]["device_name"] = 128, "NVIDIA H100"
    rows[0]["device_name"] = rows[1]["device_name"] = "NVIDIA A100"
    frame = tidy(pd.DataFrame(rows))
    assert list(frame["series"]) == ["full (d_model=64) on NVIDIA A100", "full (d_model=128) on NVIDIA A100",
                                     "full (d_model=64) on NVIDIA H100"]
    assert multi_device(frame) and devices(frame) == ["NVIDIA A100", "NVIDIA H100"]
    one = tidy(pd.DataFrame(rows[:1]))
    assert list(one["series"]) == ["full"] and not multi_device(one)


def test_records_are_checked_for_the_fields_and_types_the_report_needs():
    good = synthetic_record("full", "plain", 256).to_row()
    check_records([good], "run x")
    with pytest.raises(ReportError, match="run x holds lines that are not records"):
        check_records([good, [1]], "run x")
    with pytest.raises(ReportError, match="run x lacks field\\(s\\) seq_len"):
        check_records([{k: v for k, v in good.items() if k != "seq_len"}], "run x")
    with pytest.raises(ReportError, match="run x: record 1 \\('full'\\)"):
        check_records([{**good, "seq_len": "long"}], "run x")


def test_a_folder_that_is_no_run_is_one_line(tmp_path):
    with pytest.raises(ReportError, match="run folder not found"):
        load(tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(ReportError, match="is not a folder"):
        load(tmp_path / "file")
    with pytest.raises(ReportError, match=f"has no {RESULTS_FILE}"):
        load(tmp_path)
    (tmp_path / RESULTS_FILE).write_text("")
    with pytest.raises(ReportError, match="has no results yet"):
        load(tmp_path, role="baseline")


def test_invalid_lines_are_left_out_and_said_so_in_one_line(tmp_path):
    run_dir = write_run(tmp_path / "run", [synthetic_record("full", "plain", 256)])
    with open(run_dir / RESULTS_FILE, "a") as f:
        f.write("{torn\n")
    run = load(run_dir)
    assert len(run.frame) == 1 and len(run.skipped) == 1
    note = skipped_note(run.skipped)
    assert note.startswith(f"skipped 1 invalid record(s) of the run: {run_dir / RESULTS_FILE} line 2")
    assert "\n" not in note and one_line("a\n  b\tc") == "a b c"
