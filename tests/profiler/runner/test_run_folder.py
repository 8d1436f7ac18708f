"""The sweep's run folder (profiler.runner.run_folder): locked while a sweep writes it,
removed again when a sweep that created it fails before writing anything, and the one
rule for a folder that cannot be written (a full disk: StorageError, exit 1; a folder we
may not write: SweepError, exit 2)."""

import errno
import os
from pathlib import Path

import pytest

from attnprof.profiler.runner.errors import StorageError, SweepError
from attnprof.profiler.runner.run_folder import folder_error, locked
from attnprof.profiler.runner.storage import LOCK_FILE


class Boom(Exception):
    pass


def test_the_folder_is_created_and_locked_against_a_second_sweep(tmp_path):
    out = tmp_path / "a" / "run"
    with locked(out):
        assert (out / LOCK_FILE).is_file()
        assert (out / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(SweepError, match=rf"being written by another sweep \(pid {os.getpid()}\)"):
            with locked(out):
                pass
    with locked(out):  # released on leaving: the next sweep may write
        pass
    assert out.is_dir()  # a sweep that ended normally keeps its folder


def test_a_failed_sweep_removes_the_folder_it_created_while_it_holds_only_the_lock(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(Boom):
        with locked(out):
            raise Boom
    assert not out.exists()


def test_a_failed_sweep_keeps_a_folder_it_wrote_into_or_did_not_create(tmp_path):
    wrote = tmp_path / "wrote"
    with pytest.raises(Boom):
        with locked(wrote):
            (wrote / "results.jsonl").write_text("{}\n")
            raise Boom
    assert (wrote / "results.jsonl").is_file()
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with locked(existing):
            raise KeyboardInterrupt
    assert existing.is_dir()


@pytest.mark.parametrize("code, error", [(errno.ENOSPC, StorageError), (errno.EDQUOT, StorageError),
                                         (errno.EROFS, StorageError), (errno.EACCES, SweepError),
                                         (errno.ENOTDIR, SweepError)])
def test_a_full_disk_is_a_storage_error_and_a_forbidden_folder_a_usage_error(code, error):
    exc = folder_error(Path("/x/run"), OSError(code, os.strerror(code)))
    assert type(exc) is error
    assert str(exc) == f"cannot write the run folder /x/run: {os.strerror(code)}"


def test_a_folder_that_cannot_be_made_is_one_error_not_an_oserror(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SweepError, match="cannot write the run folder"):
        with locked(blocker / "run"):
            pass
