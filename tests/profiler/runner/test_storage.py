"""Run-folder I/O on hostile files, in-process and fast: every bad line is a reported
problem, never a crash; a failed append leaves the file as it was; one writer at a time."""

from __future__ import annotations

import errno
import json
import math
import os

import pytest

from attnprof.errors import UserError
from attnprof.profiler.records import PointRecord, Shape
from attnprof.profiler.runner import storage
from attnprof.scenarios.plan import PlanError, check_addressable
from attnprof.profiler.runner.schema import MAX_LINE_BYTES
from attnprof.profiler.runner.errors import StorageError
from attnprof.profiler.runner.storage import (MANIFEST_FILE, RESULTS_FILE, RunFolderBusy, acquire_lock,
                                              append_record, load_run, read_manifest, read_manifest_checked,
                                              read_records, read_records_checked, release_lock)
from attnprof.profiler.runner.sweep import SweepError, SweepSettings


def record(n: int = 64, **change) -> dict:
    rec = PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=n, batch=1, d_model=32, heads=2,
                      head_dim=16, layers=1, dtype="float32", measured_peak_bytes=1000 * n, time_fwd_ms=1.5,
                      time_fwd_samples_ms=[1.5], predicted_breakdown_bytes={"activations": 10}).to_row()
    rec.update(change)
    return rec


def line(rec: dict) -> bytes:
    return json.dumps(rec).encode()


BAD_LINES = [
    (b"\x00\x01\xff\xfe", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "a list where a record"),
    (b'"just a string"', "a string where a record"),
    (b"42", "an integer where a record"),
    (line(record(variant=["sdpa"])), "variant expected a string, got a list"),
    (line({k: v for k, v in record().items() if k != "seq_len"}), "missing field seq_len"),
    (line(record(seq_len=None)), "seq_len is null"),
    (line(record(seq_len=64.0)), "seq_len expected an integer, got a number"),
    (line(record(seq_len=True)), "seq_len expected an integer, got a boolean"),
    (line(record(seq_len=-4)), "seq_len must be a positive integer"),
    (line(record(heads=3)), "not divisible by heads"),
    (line(record(head_dim=7)), "head_dim 7 is not d_model/heads"),
    (line(record(status="exploded")), "status 'exploded' is not one of"),
    (line(record(time_fwd_ms="fast")), "time_fwd_ms expected a number, got a string"),
    (line(record(time_fwd_samples_ms=[1.0, "x"])), "holds a string where a number belongs"),
    (line(record(predicted_breakdown_bytes={"a": [1]})), "holds 'a': a list where a number belongs"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b'{"variant": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply"),
    (b'{"seq_len": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b" " * (MAX_LINE_BYTES + 1) + b"{}", "too long"),
]


@pytest.mark.parametrize("raw, reason", BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_each_invalid_line_is_a_problem_with_its_line_number(tmp_path, raw, reason):
    (tmp_path / RESULTS_FILE).write_bytes(line(record(64)) + b"\n\n" + raw + b"\n" + line(record(128)) + b"\n")
    records, problems = read_records_checked(tmp_path)
    assert [r["seq_len"] for r in records] == [64, 128]
    assert len(problems) == 1 and problems[0].line == 3, problems
    assert reason in problems[0].reason and "\n" not in problems[0].reason and len(problems[0].reason) < 200
    assert [r["seq_len"] for r in read_records(tmp_path)] == [64, 128]  # the callers that want records only
    assert list(load_run(tmp_path)["seq_len"]) == [64, 128]


def test_records_are_normalized_to_every_field(tmp_path):
    old = {k: v for k, v in record().items() if k in ("variant", "mode", "scope", "seq_len", "batch", "d_model",
                                                       "heads", "head_dim", "layers", "dtype", "status")}
    (tmp_path / RESULTS_FILE).write_text(json.dumps({**old, "unknown_key": {"x": 1}}) + "\n")
    [rec] = read_records(tmp_path)
    assert rec == PointRecord(**old).to_row()  # defaults filled in, the unknown key dropped
    (tmp_path / RESULTS_FILE).write_text(json.dumps(record(time_fwd_ms=math.nan)) + "\n")
    assert read_records(tmp_path) == []  # a figure is a finite number (or null): what the gate and report use
    assert "time_fwd_ms nan is not a finite number" in str(read_records_checked(tmp_path)[1][0])


def test_missing_or_unreadable_results_are_no_crash(tmp_path):
    assert read_records_checked(tmp_path) == ([], [])
    (tmp_path / RESULTS_FILE).mkdir()
    with pytest.raises(UserError, match="not a regular file"):
        read_records_checked(tmp_path)


def test_results_are_never_read_through_a_link_a_fifo_or_without_bound(tmp_path, monkeypatch):
    """A planted results.jsonl -> ~/.ssh/id_rsa would have its lines copied into the
    folder's quarantine; a FIFO would block the report forever; /dev/zero would fill memory."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    cases = {"link": lambda p: p.symlink_to(secret), "fifo": os.mkfifo, "device": lambda p: p.symlink_to("/dev/zero")}
    for name, plant in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        plant(folder / RESULTS_FILE)
        with pytest.raises(UserError, match="symbolic link|not a regular file") as info:
            read_records_checked(folder)
        assert "\n" not in str(info.value)
        assert sorted(p.name for p in folder.iterdir()) == [RESULTS_FILE], name  # nothing copied aside
    big = tmp_path / "big"
    big.mkdir()
    (big / RESULTS_FILE).write_bytes(b"{}\n" * 10)
    monkeypatch.setattr(storage, "MAX_RESULTS_BYTES", 8)
    with pytest.raises(UserError, match="larger than"):
        read_records_checked(big)


@pytest.mark.parametrize("text, reason", [
    (b"\xff\xfe", "not UTF-8"), (b"{torn", "not valid JSON"), (b"[1]", "not a JSON object"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"), (b'{"settings": [1, 2]}', "settings is not an object")])
def test_a_bad_manifest_reads_as_empty_with_a_reason(tmp_path, text, reason):
    (tmp_path / MANIFEST_FILE).write_bytes(text)
    manifest, problem = read_manifest_checked(tmp_path)
    assert "settings" not in manifest and reason in problem
    assert read_manifest(tmp_path) == manifest


# --- writing -------------------------------------------------------------------------------
def test_a_failed_append_truncates_back_and_is_a_one_line_exit_1_error(tmp_path, monkeypatch):
    append_record(tmp_path, PointRecord.from_dict(record(64)))
    before = (tmp_path / RESULTS_FILE).read_bytes()
    real_write = storage.os.write

    def half_then_full(fd, data):  # the disk fills in the middle of the line
        if len(data) > 100:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage.os, "write", half_then_full)
    with pytest.raises(StorageError) as info:
        append_record(tmp_path, PointRecord.from_dict(record(128)))
    monkeypatch.undo()
    assert isinstance(info.value, UserError) and info.value.exit_code == 1
    assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    assert (tmp_path / RESULTS_FILE).read_bytes() == before


def test_one_writer_at_a_time(tmp_path):
    fd = acquire_lock(tmp_path)
    with pytest.raises(RunFolderBusy) as info:
        acquire_lock(tmp_path)
    assert info.value.holder.isdigit()
    release_lock(fd)
    release_lock(acquire_lock(tmp_path))


# --- refused before anything runs ----------------------------------------------------------
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1.0, True, "300"])
def test_a_point_timeout_that_would_never_fire_is_refused(value):
    with pytest.raises(SweepError, match="--point-timeout must be a finite positive"):
        SweepSettings(point_timeout_s=value)


def test_lengths_beyond_int64_are_a_plan_error():
    check_addressable(Shape(seq_len=1 << 20, d_model=32, heads=2))
    with pytest.raises(PlanError, match="beyond what torch can address") as info:
        check_addressable(Shape(seq_len=1 << 31, d_model=32, heads=2))
    assert "\n" not in str(info.value)


def test_more_torch_threads_than_usable_cores_is_refused_locally():
    from attnprof.profiler.forks import usable_cores

    with pytest.raises(SweepError, match=r"threads 100000 is more than the \d+ CPU"):
        SweepSettings(device="cpu", threads=100000)
    SweepSettings(device="cpu", threads=usable_cores())  # as many as there are: fine
    SweepSettings(device="cpu", executor="ray", threads=64)  # a Ray node's cores are its own
