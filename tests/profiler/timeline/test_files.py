"""File names from points (safe, distinct) and writing them into a folder that is data."""

import dataclasses
import os

import pytest
from timeline_points import HOSTILE, point

from attnprof.profiler.safeio import LinkRefused, UnwritablePath
from attnprof.profiler.timeline.files import NAME_BYTES, check_folder, file_name, write_files


def test_names_are_safe_readable_and_distinct():
    p = point()
    name = file_name(p)
    assert name.startswith("full-plain-model-n128-b1-L2-float32-")
    hostile = file_name(dataclasses.replace(p, variant=HOSTILE, spec=None), "gpu/../x\n")
    assert not any(ch in hostile for ch in "/\\\x00\n\x1b\u202e") and not hostile.startswith(".")
    assert file_name(dataclasses.replace(p, variant=".hidden", spec=None)).startswith("%2E")
    assert file_name(p) != file_name(point(layers=3)) != file_name(p, "h100-sxm")
    assert file_name(dataclasses.replace(p, variant="a/b", spec=None)) != file_name(
        dataclasses.replace(p, variant="a%2Fb", spec=None))
    assert len(file_name(dataclasses.replace(p, variant="x" * 1000, spec=None)).encode()) <= NAME_BYTES + 9


def test_both_files_are_written_and_a_planted_link_is_never_followed(tmp_path):
    target = tmp_path / "bashrc"
    target.write_text("mine")
    out = tmp_path / "out"
    paths = write_files(out, "n", b"snap", b"{}")
    assert [p.name for p in paths] == ["n.memory.pickle", "n.trace.json"] and paths[0].read_bytes() == b"snap"
    os.symlink(target, out / "m.trace.json")
    with pytest.raises(LinkRefused):
        write_files(out, "m", b"snap", b"{}")
    assert target.read_text() == "mine"
    os.symlink(tmp_path, tmp_path / "linked")
    with pytest.raises(LinkRefused):
        write_files(tmp_path / "linked", "k", b"", b"")


def test_a_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UnwritablePath) as err:
        check_folder(tmp_path / "file" / "sub")
    assert "\n" not in str(err.value)
    check_folder(tmp_path / "new" / "folder")  # absent folders are made later: fine
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # the probe left nothing behind
    with pytest.raises(UnwritablePath, match="cannot write the timeline folder /proc/attnprof-tl: "):
        check_folder("/proc/attnprof-tl")  # root's permission bits pass /proc; the probe does not
