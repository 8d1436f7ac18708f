"""Writing into a folder that is data: no write ever lands outside it through a planted
link (symbolic or hard), a FIFO never blocks, and an unwritable place is one line before
any work."""

from __future__ import annotations

import json
import os

import pytest

from attnprof.errors import UserError
from attnprof.profiler import safeio
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner import storage
from attnprof.profiler.runner.manifest import write_manifest
from attnprof.profiler.runner.sweep import SweepSettings
from attnprof.scenarios.scenario import Scenario

PRECIOUS = b"export PATH=/usr/bin\n"


@pytest.fixture
def outside(tmp_path):
    """A file outside the folder, and the folder; each test plants links in the folder."""
    target = tmp_path / "outside" / ".bashrc"
    target.parent.mkdir()
    target.write_bytes(PRECIOUS)
    folder = tmp_path / "run"
    folder.mkdir()
    return target, folder


def record() -> PointRecord:
    return PointRecord(variant="sdpa", mode="plain", scope="model", seq_len=64, batch=1, d_model=32, heads=2,
                       head_dim=16, layers=1, dtype="float32")


WRITERS = {
    "write_atomic": lambda folder, name: safeio.write_atomic(folder / name, b"new"),
    "open_append": lambda folder, name: os.close(safeio.open_append(folder / name)),
    "open_lock": lambda folder, name: os.close(safeio.open_lock(folder / name)),
    "append_record": lambda folder, name: storage.append_record(folder, record()),
    "acquire_lock": lambda folder, name: storage.release_lock(storage.acquire_lock(folder)),
    "write_manifest": lambda folder, name: write_manifest(folder, Scenario(name="t"), SweepSettings(device="cpu")),
}
NAMES = {"append_record": storage.RESULTS_FILE, "acquire_lock": storage.LOCK_FILE,
         "write_manifest": storage.MANIFEST_FILE}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "hard link"])
def test_no_writer_writes_through_a_planted_link(outside, writer, kind):
    target, folder = outside
    name = NAMES.get(writer, "report.html")
    if kind == "symlink":
        (folder / name).symlink_to(target)
    elif kind == "dangling symlink":
        target = target.with_name("created-by-attnprof")
        (folder / name).symlink_to(target)
    else:
        os.link(target, folder / name)
    if kind == "hard link" and writer in ("write_atomic", "write_manifest"):
        WRITERS[writer](folder, name)  # replaced by a new file: the other name keeps its bytes
        assert not (folder / name).samefile(target)
    else:
        with pytest.raises(safeio.LinkRefused) as info:
            WRITERS[writer](folder, name)
        message = str(info.value)
        assert isinstance(info.value, UserError) and not isinstance(info.value, OSError)
        assert "\n" not in message and str(folder / name) in message
    if kind == "dangling symlink":
        assert not target.exists(), "a write followed the link and created its target"
    else:
        assert target.read_bytes() == PRECIOUS


def test_a_planted_temporary_file_link_is_refused(outside):
    target, folder = outside
    (folder / "manifest.json.tmp").symlink_to(target)
    with pytest.raises(safeio.LinkRefused, match="manifest.json.tmp is a symbolic link"):
        write_manifest(folder, Scenario(name="t"), SweepSettings(device="cpu"))
    assert target.read_bytes() == PRECIOUS and not (folder / "manifest.json").exists()


def test_write_atomic_replaces_a_stale_temporary_file_and_leaves_none(tmp_path):
    (tmp_path / "report.html.tmp").write_bytes(b"left by a killed render")
    safeio.write_atomic(tmp_path / "report.html", b"<html>")
    assert (tmp_path / "report.html").read_bytes() == b"<html>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "results.jsonl")
    os.mkfifo(tmp_path / "report-predictions.json")
    with pytest.raises(safeio.LinkRefused, match="not a regular file"):
        os.close(safeio.open_append(tmp_path / "results.jsonl"))
    with pytest.raises(safeio.LinkRefused, match="not a regular file"):
        safeio.read_bounded(tmp_path / "report-predictions.json", 1 << 20)


def test_read_bounded_reads_up_to_its_bound(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"a": 1}))
    assert safeio.read_bounded(tmp_path / "c.json", 100) == b'{"a": 1}'
    assert safeio.read_bounded(tmp_path / "absent.json", 100) is None
    with pytest.raises(ValueError, match="larger than 4 bytes"):
        safeio.read_bounded(tmp_path / "c.json", 4)


# --- checked before any work ---------------------------------------------------------------
def test_unwritable_places_are_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = {
        blocker / "run": "is a file, not a folder",
        blocker: "is a file, not a folder",
        tmp_path / ("x" * 300): "longer than 255 bytes",
        tmp_path / "deep" / ("y" * 256) / "run": "longer than 255 bytes",
    }
    for path, fragment in cases.items():
        with pytest.raises(safeio.UnwritablePath) as info:
            safeio.check_folder_writable(path, "the run folder")
        assert fragment in str(info.value) and "\n" not in str(info.value), path
    with pytest.raises(safeio.UnwritablePath, match="longer than 255"):
        safeio.check_file_writable(tmp_path / ("r" * 300 + ".html"), "the report")
    safeio.check_folder_writable(tmp_path / "new" / "run", "the run folder")  # creatable: fine
    assert not (tmp_path / "new").exists()  # and nothing was created to find out
    monkeypatch.setattr(safeio.os, "access", lambda path, mode: False)  # as a read-only folder answers
    with pytest.raises(safeio.UnwritablePath, match="is not writable"):
        safeio.check_folder_writable(tmp_path / "new" / "run", "the run folder")


PROC = "/proc/attnprof-probe-test"  # /proc takes no new entry: root passes its permission bits, a probe does not


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux's /proc")
def test_a_probe_finds_what_permission_bits_do_not(tmp_path):
    """As root, os.access says /proc is writable; making anything in it fails. A probe (a path
    the user named: --out, --json-out) finds that before any work, and leaves nothing behind."""
    for path in (PROC, f"{PROC}/run"):
        with pytest.raises(safeio.UnwritablePath) as info:
            safeio.check_folder_writable(path, "the run folder", probe=True)
        assert str(info.value).startswith(f"cannot write the run folder {path}: ") and "\n" not in str(info.value)
    with pytest.raises(safeio.UnwritablePath, match="cannot write --out /proc/x.csv: "):
        safeio.check_file_writable("/proc/x.csv", "--out", probe=True)
    safeio.check_folder_writable(tmp_path / "new" / "run", "the run folder", probe=True)  # creatable: fine
    safeio.check_folder_writable(tmp_path, "the run folder", probe=True)  # and so is a folder that exists
    assert list(tmp_path.iterdir()) == []  # nothing left by either probe


def test_a_probe_follows_a_link_the_user_named_as_the_write_would(tmp_path):
    """A place the user named is probed where the write would land, through a link too."""
    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir()
    link.symlink_to(target)
    safeio.check_folder_writable(link / "run", "the run folder", probe=True)
    assert list(target.iterdir()) == []  # nothing left behind there
    if os.path.isdir("/proc"):
        (tmp_path / "proc").symlink_to("/proc")
        with pytest.raises(safeio.UnwritablePath, match="nothing can be made in"):
            safeio.check_file_writable(tmp_path / "proc" / "x.csv", "--out", probe=True)


def test_probes_of_neighbouring_places_do_not_refuse_each_other(tmp_path):
    """Two sweeps started together under one new folder (runs/new/a, runs/new/b): a probe that
    made and removed the shared first folder refused the other (File exists, No such file)."""
    from concurrent.futures import ThreadPoolExecutor

    def probe(i: int) -> None:
        safeio.check_folder_writable(tmp_path / f"new{i % 5}" / f"run{i}", "the run folder", probe=True)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(probe, range(2000)))
    assert list(tmp_path.iterdir()) == []


def test_make_folder_refuses_a_link_or_a_file_in_one_line(tmp_path):
    from attnprof.profiler.safeio import LinkRefused, make_folder

    assert make_folder(tmp_path / "a" / "b", parents=True).is_dir()
    assert make_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"  # again: already there
    (tmp_path / "file").write_text("x")
    with pytest.raises(LinkRefused, match="not a folder"):
        make_folder(tmp_path / "file")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LinkRefused, match="symbolic link"):
        make_folder(tmp_path / "link", parents=True)
    with pytest.raises(safeio.UnwritablePath, match="cannot make the folder"):
        make_folder(tmp_path / "file" / "under", parents=True)


def test_move_aside_keeps_the_bytes_under_a_new_name_and_never_replaces_one(tmp_path):
    from attnprof.profiler.safeio import ASIDE, move_aside

    path = tmp_path / "cache.json"
    names = []
    for content in (b"first \xff", b"second"):  # the same second: a name of its own each time
        path.write_bytes(content)
        moved = move_aside(path)
        names.append(moved.name)
        assert moved.parent == tmp_path and ASIDE in moved.name and moved.read_bytes() == content
        assert not path.exists()
    assert len(set(names)) == 2
    target = tmp_path / "target"
    target.write_text("keep")
    path.symlink_to(target)  # a link is moved as a link: its target is not touched
    moved = move_aside(path)
    assert moved.is_symlink() and target.read_text() == "keep"
    with pytest.raises(FileNotFoundError):
        move_aside(path)
