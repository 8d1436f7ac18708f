"""The caches' trust model (profiler.measure.trust): a checksum proves an entry whole, not
who wrote it, so the prediction and calibration caches are used only in a folder that is
the user's own. A folder writable by others (without the sticky bit) or owned by another
uid costs one warning line and predictions are computed uncached; a planted entry is never read.
(The suite runs as root: mode bits are checked as such, and root can chown to any uid.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.measure import trust
from attnprof.profiler.predict import cache
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.timemodel import machine

POINT = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=128, d_model=32, heads=4, layers=1))
OTHER_UID = 12345


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch):
    monkeypatch.setenv(trust.WARNED_ENV, "")  # every test may warn (and the variable is removed after it)


def plant(root: Path, peak: int) -> Path:
    """Rewrite the one entry with figures of our choosing and a correct checksum: what
    anyone who can write the folder can do."""
    (path,) = (root / "predictions").glob("*.json")
    data = json.loads(path.read_text())
    data["value"]["peak_bytes"] = peak
    data["checksum"] = cache.checksum(data["key"], data["value"])
    path.write_text(json.dumps(data))
    return path


def test_a_matching_checksum_does_not_prove_who_wrote_an_entry(prediction_cache_dir):
    real = predict(POINT).peak_bytes
    plant(prediction_cache_dir, 1)
    assert predict(POINT).peak_bytes == 1 != real  # in the user's own folder the cache is trusted as is


@pytest.mark.parametrize("make_untrusted", [
    lambda root: os.chmod(root, 0o777),  # world-writable
    lambda root: os.chmod(root / "predictions", 0o770),  # group-writable entries folder
    lambda root: os.chown(root, OTHER_UID, -1),  # another user's folder
])
def test_a_folder_others_can_write_is_not_used(prediction_cache_dir, capsys, make_untrusted):
    real = predict(POINT).peak_bytes
    planted = plant(prediction_cache_dir, 1)
    before = planted.read_bytes()
    make_untrusted(prediction_cache_dir)
    capsys.readouterr()
    first, second = predict(POINT), predict(POINT)
    assert first.peak_bytes == second.peak_bytes == real and not first.cached and not second.cached
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another user could plant figures" in err[0], err  # one line, not one per point
    assert planted.read_bytes() == before and len(list((prediction_cache_dir / "predictions").iterdir())) == 1


def test_in_a_sticky_shared_folder_only_entries_of_ours_are_read(prediction_cache_dir, capsys):
    real = predict(POINT).peak_bytes
    for folder in (prediction_cache_dir, prediction_cache_dir / "predictions"):
        os.chmod(folder, 0o1777)  # as /tmp: others may create files, not replace ours
    assert predict(POINT).cached  # a sticky folder is usable: our own entries are read back
    planted = plant(prediction_cache_dir, 1)
    os.chown(planted, OTHER_UID, -1)  # an entry another user created under a name we had not written
    assert predict(POINT).peak_bytes == real
    assert capsys.readouterr().err == ""


def test_the_command_line_warns_once_and_predicts_uncached(prediction_cache_dir):
    os.chmod(prediction_cache_dir, 0o757)
    result = CliRunner().invoke(app, ["predict", "--variant", "sdpa,full", "--mode", "plain,checkpoint", "--seq-len",
                                      "128", "--d-model", "32", "--heads", "2", "--layers", "1"])
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cache folder" in warnings[0], result.stderr
    assert not (prediction_cache_dir / "predictions").exists()  # nothing written there


def test_a_calibration_folder_others_can_write_is_not_used(capsys):
    cal, _ = machine.calibration(1)
    folder = machine.path_of(cal.key()).parent
    assert machine.load(cal.key()) == cal
    os.chmod(folder, 0o777)
    warned = []
    assert machine.load(cal.key(), warn=warned.append) is None
    assert len(warned) == 1 and str(folder) in warned[0]
    again, cached = machine.calibration(1, warn=warned.append)  # measured, and not written there
    assert not cached and len(warned) == 1


def test_folders_the_cache_creates_are_private(tmp_path, monkeypatch):
    root = tmp_path / "new" / "cache"
    monkeypatch.setenv(cache.ENV, str(root))
    previous = os.umask(0)
    try:
        predict(POINT)
    finally:
        os.umask(previous)
    for folder in (root.parent, root, root / "predictions"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert trust.folder_problem(root) is None and predict(POINT).cached


PREDICT = ["predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "256", "--d-model", "32", "--heads", "2",
           "--layers", "1"]


def warning_lines(text: str) -> list:
    return [line for line in text.splitlines() if "warning" in line]


def test_a_file_in_place_of_the_cache_folder_is_said_once(tmp_path, monkeypatch):
    """Issue 40, item 6: a file where the cache folder goes gave one warning per cache
    (prediction, calibration), with two prefixes."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ATTNPROF_CACHE_DIR", str(blocker))
    cache.reset_warnings()
    result = CliRunner().invoke(app, [*PREDICT, "--sort", "time"])  # predicts, and calibrates this CPU
    assert result.exit_code == 0, result.stderr
    said = warning_lines(result.stderr)
    assert len(said) == 1 and said[0].startswith("warning: cache folder ") and "a file, not a folder" in said[0]
    plain = CliRunner().invoke(app, PREDICT)  # no calibration: the hint promises no cache
    assert "cached" not in plain.stderr and "`attnprof calibrate`" in plain.stderr, plain.stderr
    assert trust.not_a_folder(blocker) and trust.not_a_folder(blocker / "predictions") == "under a file, not a folder"
    assert trust.not_a_folder(tmp_path) is None and trust.not_a_folder(tmp_path / "not-yet") is None


def test_a_file_in_place_of_the_calibration_folder_is_one_line_and_no_file_is_named(prediction_cache_dir):
    """Issue 40, item 6: calibrate said 'measured in 4.5 s: .../calibration/....json' naming a
    file it never wrote, after two warnings (two prefixes) for the one cause."""
    (prediction_cache_dir / "calibration").write_text("in the way")
    result = CliRunner().invoke(app, ["calibrate"])
    assert result.exit_code == 0, result.stderr
    said = warning_lines(result.stderr)
    assert len(said) == 1 and said[0].startswith("warning: cache folder ") and "calibration" in said[0], said
    head = result.stdout.splitlines()[0]
    assert "not cached" in head and ".json" not in head, head
    as_json = CliRunner().invoke(app, ["calibrate", "--json"])
    assert json.loads(as_json.stdout)["path"] is None


def test_every_warning_starts_the_same_way():
    """Issue 40, item 6: one prefix. No source line writes 'attnprof: warning:'."""
    from source_tree import source_paths

    for path in source_paths(Path(trust.__file__).parents[2]):
        assert "attnprof: warning" not in path.read_text(encoding="utf-8"), path


def test_a_warning_names_the_folder_on_one_line(tmp_path, capsys):
    """A newline in the cache folder's name (ATTNPROF_CACHE_DIR) is spelled out: no line of its own."""
    folder = tmp_path / "cache\nPASS"
    folder.mkdir()
    folder.chmod(0o777)
    assert not trust.usable(folder, folder)  # no warn given: the warning goes to stderr
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cache\\nPASS is writable by other users" in err


def test_a_link_where_a_cache_folder_goes_is_never_written_through(prediction_cache_dir, tmp_path, capsys):
    """The cache's root is the user's choice (followed); a link below it is planted: entries
    were written into its target, with no warning."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (prediction_cache_dir / "predictions").symlink_to(elsewhere)
    cache.reset_warnings()
    assert not predict(POINT).cached and not predict(POINT).cached  # computed, never cached
    assert list(elsewhere.iterdir()) == []
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(said) == 1 and "predictions is a symbolic link" in said[0]
