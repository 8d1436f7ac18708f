"""``--resume`` deletes nothing: invalid lines are moved byte for byte to
results.quarantine.jsonl, a folder without a valid record or with a corrupt manifest is
refused, and a planted link or an unwritable folder is one line before the banner."""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.quarantine import quarantine_invalid, resume_problem
from attnprof.profiler.runner.storage import (LOCK_FILE, MANIFEST_FILE, QUARANTINE_FILE, RESULTS_FILE,
                                              read_records_checked)

runner = CliRunner()
SWEEP = ["sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64", "--max-len", "64", "--d-model", "32",
         "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--no-report",
         "--quiet"]


def line(n: int = 64, **change) -> bytes:
    row = PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=n, batch=1, d_model=32, heads=2,
                      head_dim=16, layers=1, dtype="float32", measured_peak_bytes=1000 * n).to_row()
    return json.dumps({**row, **change}).encode()


def restore(results: bytes, quarantine: bytes) -> bytes:
    """The original results file, from what --resume left: the kept lines, and each
    quarantined line put back at its line number (its bytes, and its newline if it had one)."""
    moved = {}
    for raw in quarantine.splitlines():
        entry = json.loads(raw)
        moved[entry["line"]] = base64.b64decode(entry["raw_base64"]) + (b"\n" if entry["newline"] else b"")
    kept, out, number = results.splitlines(keepends=True), [], 1
    while kept or moved:
        out.append(moved.pop(number) if number in moved else kept.pop(0))
        number += 1
    return b"".join(out)


DEEP = b"[" * 200_000 + b"]" * 200_000
GOOD = line(64) + b"\n" + line(128) + b"\n"
CASES = {
    "variant is a list": GOOD + line(256, variant=["sdpa"]) + b"\n",
    "a line 5": line(64) + b"\n5\n" + line(128) + b"\n",
    "seq_len null": GOOD + line(256, seq_len=None) + b"\n",
    "200k deep": line(64) + b"\n" + DEEP + b"\n\n" + line(128) + b"\n",
    "several, and a torn tail": GOOD + b"\x00\xff binary\n" + line(256, variant=["x"]) + b"\n" + line(512)[:40],
}


@pytest.mark.parametrize("name", CASES)
def test_invalid_lines_are_moved_byte_for_byte_never_deleted(tmp_path, name):
    original = CASES[name]
    (tmp_path / RESULTS_FILE).write_bytes(original)
    note = quarantine_invalid(tmp_path)
    results, aside = (tmp_path / RESULTS_FILE).read_bytes(), (tmp_path / QUARANTINE_FILE).read_bytes()
    assert restore(results, aside) == original
    records, problems = read_records_checked(tmp_path)
    assert not problems and [r["seq_len"] for r in records] == [64, 128]  # only valid lines stay
    entries = [json.loads(e) for e in aside.splitlines()]
    assert note.count("\n") == 0 and f"moved {len(entries)} invalid line(s)" in note and QUARANTINE_FILE in note
    assert all(f"{e['line']}" in note for e in entries) and all(e["reason"] for e in entries)
    assert quarantine_invalid(tmp_path) is None  # nothing more to move


@pytest.mark.parametrize("content", [random.Random(0).randbytes(4096), b"5\n", b"5\n" + line(64)[:30],
                                     line(64, variant=["a"]) + b"\n" + DEEP + b"\n"], ids=["random", "5", "5+torn", "bad"])
def test_a_file_without_a_valid_record_is_refused_and_left_as_it_is(tmp_path, content):
    (tmp_path / RESULTS_FILE).write_bytes(content)
    assert "holds no valid record" in resume_problem(tmp_path)
    with pytest.raises(SweepError, match="holds no valid record") as info:
        quarantine_invalid(tmp_path)
    assert str(tmp_path / RESULTS_FILE) in str(info.value) and "\n" not in str(info.value)
    assert (tmp_path / RESULTS_FILE).read_bytes() == content and not (tmp_path / QUARANTINE_FILE).exists()
    result = runner.invoke(app, [*SWEEP, "--out", str(tmp_path), "--resume"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and RESULTS_FILE in result.stderr
    assert (tmp_path / RESULTS_FILE).read_bytes() == content


def test_a_lone_torn_first_record_is_moved_aside_and_a_missing_newline_added(tmp_path):
    (tmp_path / RESULTS_FILE).write_bytes(line(64)[:50])  # killed while writing the very first record
    assert resume_problem(tmp_path) is None
    assert "torn last line" in quarantine_invalid(tmp_path)
    assert (tmp_path / RESULTS_FILE).read_bytes() == b""
    assert restore(b"", (tmp_path / QUARANTINE_FILE).read_bytes()) == line(64)[:50]
    (tmp_path / RESULTS_FILE).write_bytes(line(64))
    assert "newline" in quarantine_invalid(tmp_path)
    assert (tmp_path / RESULTS_FILE).read_bytes() == line(64) + b"\n"


# --- refused before the banner: the CLI ----------------------------------------------------
def folder_with_results(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / RESULTS_FILE).write_bytes(GOOD)
    return path


def refused(args, *fragments):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr  # no banner
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result


def test_a_corrupt_manifest_is_refused_on_resume_with_a_hint(tmp_path):
    run = folder_with_results(tmp_path / "run")
    (run / RESULTS_FILE).write_bytes(GOOD + b"5\n")
    for text in ('{"scenario": ', '{"settings": [1, 2]}', "[" * 200_000):
        (run / MANIFEST_FILE).write_text(text)
        refused([*SWEEP, "--out", str(run), "--resume"], "manifest.json", "move it aside")
        assert (run / RESULTS_FILE).read_bytes() == GOOD + b"5\n"  # refused before anything changed


@pytest.mark.parametrize("name", [RESULTS_FILE, MANIFEST_FILE, MANIFEST_FILE + ".tmp", LOCK_FILE, QUARANTINE_FILE,
                                  "report.html", "report-memory.png", "report-predictions.json"])
def test_sweep_resume_refuses_each_planted_link_and_its_target_is_untouched(tmp_path, name):
    run = folder_with_results(tmp_path / "run")
    target = tmp_path / "outside.txt"
    target.write_bytes(GOOD if name == RESULTS_FILE else b"precious\n")
    before = target.read_bytes()
    if name == RESULTS_FILE:
        (run / name).unlink()
    (run / name).symlink_to(target)
    args = [a for a in SWEEP if a != "--no-report"] if name.startswith("report") else SWEEP  # the render writes these
    refused([*args, "--out", str(run), "--resume"], "symbolic link", name)
    assert target.read_bytes() == before


def test_an_unwritable_run_folder_is_one_line_before_the_banner(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    refused([*SWEEP, "--out", str(blocker / "run")], "is a file, not a folder")
    refused([*SWEEP, "--out", str(tmp_path / ("r" * 300))], "longer than 255 bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    if os.path.isdir("/proc"):  # root passes /proc's permission bits; making anything there fails: probed
        refused([*SWEEP, "--out", "/proc/attnprof-run"], "cannot write the run folder /proc/attnprof-run")


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs: unwritable even for root (EROFS), unmounted afterwards."""
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a read-only tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_read_only_out_or_working_folder_is_one_line_exit_2_before_the_banner(read_only_dir, monkeypatch):
    refused([*SWEEP, "--out", str(read_only_dir / "run")], "read-only file system")
    monkeypatch.chdir(read_only_dir)  # the default --out, runs/sweep-TIMESTAMP, is under it
    refused(SWEEP, "read-only file system", "runs")
