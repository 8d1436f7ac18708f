"""The gate's baseline file (profiler.gate.baseline): written atomically from a run, one
point per line, read back to the same points, and every way a file can be wrong is one
GateError naming it."""

import json
import stat

import pytest

from attnprof.profiler.gate.baseline import FORMAT, VERSION, dump_baseline, read_baseline, update_baseline
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.snapshot import read_run

from helpers_gate import LENGTHS, VARIANTS, make_run


@pytest.fixture
def written(tmp_path):
    run = make_run(tmp_path / "run")
    path = tmp_path / "ci" / "baseline.json"
    return run, path, update_baseline(path, run)


def test_a_baseline_reads_back_the_points_of_the_run_it_was_made_from(written):
    run, path, doc = written
    assert doc["format"] == FORMAT and doc["version"] == VERSION and doc["created_from"] == str(run)
    base, snap = read_baseline(path), read_run(run)
    assert base.points == {k: {f: p[f] for f in base.points[k]} for k, p in snap.points.items()}
    assert base.scenario == snap.scenario and base.device == "cpu" and base.device_name == "Test CPU"


def test_the_file_has_one_point_per_line_and_is_readable_by_others(written):
    _, path, doc = written
    text = path.read_text()
    assert text == dump_baseline(doc) and json.loads(text) == doc
    point_lines = [line for line in text.splitlines() if line.startswith("    {")]
    assert len(point_lines) == len(VARIANTS) * len(LENGTHS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["baseline.json"]  # no temp file left behind


def test_refreshing_replaces_the_file_whole(written, tmp_path):
    _, path, _ = written
    smaller = make_run(tmp_path / "smaller", skip=[(v, 512) for v in VARIANTS])
    update_baseline(path, smaller)
    assert len(read_baseline(path).points) == len(VARIANTS)


@pytest.mark.parametrize("edit, fragment", [
    (lambda doc: "", "is empty"),
    (lambda doc: json.dumps(doc)[:-20], "is not valid JSON"),
    (lambda doc: json.dumps({**doc, "format": "other"}), "is not an attnprof baseline"),
    (lambda doc: json.dumps({**doc, "version": 99}), "has version 99"),
    (lambda doc: json.dumps({**doc, "scenario": {}}), "names no scenario"),
    (lambda doc: json.dumps({**doc, "points": []}), "holds no points"),
    (lambda doc: json.dumps({**doc, "device": 3}), "device must be a string"),
    (lambda doc: json.dumps({**doc, "points": doc["points"] + doc["points"][:1]}), "appears twice"),
])
def test_every_wrong_file_is_one_gate_error_naming_the_file(written, edit, fragment):
    _, path, doc = written
    path.write_text(edit(doc))
    with pytest.raises(GateError, match=fragment) as info:
        read_baseline(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_invalid_point_is_named_with_its_line_unless_skipped(written):
    _, path, doc = written
    doc["points"][1]["measured_peak_bytes"] = "lots"
    path.write_text(dump_baseline(doc))
    with pytest.raises(GateError, match=r"point 1 \(line \d+\).*--skip-invalid"):
        read_baseline(path)
    snap = read_baseline(path, skip_invalid=True)
    assert len(snap.skipped) == 1 and len(snap.points) == len(VARIANTS) * len(LENGTHS) - 1


def test_a_missing_baseline_says_how_to_create_it(tmp_path):
    with pytest.raises(GateError, match="attnprof gate --update --baseline"):
        read_baseline(tmp_path / "nope.json")


def test_a_folder_or_fifo_where_the_baseline_goes_is_named_and_never_replaced(tmp_path):
    """Was 'baseline not found ... (create it with: attnprof gate --update ...)', and that command
    replaced the FIFO (or a device node: /dev/zero as root) with a file."""
    import os

    run = make_run(tmp_path / "run")
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO"), (folder, "a folder")):
        for call in (lambda: read_baseline(path), lambda: update_baseline(path, run)):
            with pytest.raises(GateError, match=f"baseline {path} is {kind}, not a baseline file"):
                call()
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and folder.is_dir() and not any(folder.iterdir())
