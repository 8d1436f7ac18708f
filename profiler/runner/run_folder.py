"""The run folder a sweep writes: created and locked against a second writer while the
sweep runs (removed again when a sweep that created it fails before writing anything),
and the one rule for a folder that cannot be written (a full disk: exit 1; a folder we
may not write: exit 2)."""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path

from attnprof.profiler.runner.errors import StorageError, SweepError
from attnprof.profiler.runner.storage import LOCK_FILE, RunFolderBusy, acquire_lock, refuse_planted_links, release_lock

_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS}


@contextmanager
def locked(out_dir: Path):
    """The run folder, created if need be and locked against a second writer while the sweep runs.
    A sweep that fails to start (a cluster that does not answer) removes the folder again
    when it created it and it holds nothing but the lock: no empty, locked folder is left."""
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        refuse_planted_links(out_dir)  # LinkRefused, exit 2: no OSError, so it passes the handler below
        fd = acquire_lock(out_dir)
    except RunFolderBusy as exc:
        raise SweepError(f"{out_dir} is being written by another sweep (pid {exc.holder}); "
                         f"wait for it to finish, or choose another --out") from None
    except OSError as exc:
        raise folder_error(out_dir, exc) from None
    try:
        yield
    except BaseException:
        if created:
            _remove_if_untouched(out_dir)
        raise
    finally:
        release_lock(fd)


def _remove_if_untouched(out_dir: Path) -> None:
    """Remove ``out_dir`` if it holds only the lock file this sweep made (while the lock is
    still held, so no second sweep can have written anything in it); else leave it be."""
    try:
        if [entry.name for entry in os.scandir(out_dir)] == [LOCK_FILE]:
            os.unlink(out_dir / LOCK_FILE)
            os.rmdir(out_dir)
    except OSError:
        pass  # what cannot be removed stays: never an error on top of the one being raised


def folder_error(out_dir: Path, exc: OSError) -> SweepError | StorageError:
    """A full or failing disk is StorageError (exit 1); a folder we may not write, SweepError (exit 2)."""
    text = f"cannot write the run folder {out_dir}: {exc.strerror or exc}"
    return StorageError(text) if exc.errno in _DISK_ERRNOS else SweepError(text)
