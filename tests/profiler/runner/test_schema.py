"""The schema of one results.jsonl line (profiler/runner/schema.py): a line becomes a
record with every PointRecord field, or a one-phrase reason why not. (Hostile files
read through the run folder: test_storage.py.)"""

from __future__ import annotations

from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.schema import MAX_LINE_BYTES, check_record, parse_line


def good() -> dict:
    return PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=64, batch=1, d_model=32, heads=2,
                       head_dim=16, layers=1, dtype="float32").to_row()


def test_an_older_record_gets_the_defaults_and_unknown_keys_are_dropped():
    old = {k: v for k, v in good().items() if k not in ("gpu_note", "cudnn_version", "ff_chunks")}
    record, problem = check_record({**old, "from_the_future": 1})
    assert problem is None and record == good()


def test_a_line_is_utf8_json_of_a_record_within_its_length():
    assert parse_line(b'{"variant": "sdpa"}') == (None, "missing field mode")
    assert parse_line(b"\xff")[1] == "not UTF-8 text (binary data)"
    assert parse_line(b"{")[1].startswith("not valid JSON (")
    assert parse_line(b" " * (MAX_LINE_BYTES + 1))[1].endswith("too long for a record")
    assert parse_line(b"[]") == (None, "a list where a record (an object) belongs")


def test_a_negative_infinite_or_beyond_int64_figure_is_refused():
    """Every number of a record is a size, count, byte count, time, rate or pid: the bounds the
    gate and the report check (gate/checks.py), so a line resume keeps is one they can use
    (a measured_peak_bytes of -5 was kept by resume and then refused by the report)."""
    for name, bad in (("predicted_time_fwd_ms", -1.0), ("predicted_time_fwd_ms", float("inf")),
                      ("time_fwd_ms", float("nan")), ("measured_peak_bytes", -5), ("measured_peak_bytes", 2**63),
                      ("measured_peak_bytes", 10**400), ("worker_pid", -1), ("point_wall_s", -0.5)):
        record, problem = check_record({**good(), name: bad})
        assert record is None and problem.startswith(f"{name} ") and "from 0 to 2**63 - 1" in problem, (name, problem)
        assert len(problem) < 120
    for name, fine in (("measured_peak_bytes", 0), ("measured_peak_bytes", 2**63 - 1), ("time_fwd_ms", 0.0)):
        assert check_record({**good(), name: fine})[1] is None


def test_a_record_without_a_status_is_refused_not_read_as_ok():
    good = PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=64, batch=1, d_model=32, heads=2,
                       head_dim=16, layers=1, dtype="float32").to_row()
    assert check_record(good)[0]["status"] == "ok"
    record, problem = check_record({k: v for k, v in good.items() if k != "status"})
    assert record is None and problem == "missing field status"


def test_a_nan_sample_written_as_null_reads_back_as_nan_not_as_a_refused_line():
    """units.strict_json writes a NaN inside a list or object of numbers as null; the record the
    sweep itself wrote must come back on --resume (the NaN as it was), not be quarantined."""
    import json
    import math

    from attnprof.profiler.units import strict_json

    row = {**good(), "time_fwd_samples_ms": [1.0, float("nan")], "point_phases_s": {"start": float("nan")}}
    record, problem = parse_line(strict_json(row).encode())
    assert problem is None
    assert record["time_fwd_samples_ms"][0] == 1.0 and math.isnan(record["time_fwd_samples_ms"][1])
    assert math.isnan(record["point_phases_s"]["start"])
    for bad in (["x"], [True], [[1.0]]):  # anything else is still no number
        assert "where a number belongs" in check_record({**json.loads(strict_json(good())),
                                                         "time_fwd_samples_ms": bad})[1]
