"""Whose cache is it? The prediction and calibration caches are used only in folders the
user alone can write.

An entry's checksum (cache.py) proves the entry is whole and was written for this key
by this version of attnprof; it cannot prove *who* wrote it: anyone who can write the
folder can compute the same checksum over figures of their choosing. So a folder is
trusted only when it belongs to this user (``os.geteuid()``) and no one else may write
it: no group or world write bit, unless the sticky bit is set (as on /tmp), where others
cannot replace our files but may still create names we have not written yet, so there
every entry read must itself be ours and writable by us alone (``own_entry``).

An untrusted folder, or a file where a cache folder goes, costs one warning line (the
processes a command starts after it stay quiet: ``WARNED_ENV``), and the caller computes
without the cache: never an error.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler.units import printable

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
# The folder already warned about, in the environment so that every process started after
# the warning (forked prediction workers, a sweep's point processes) stays quiet about it.
WARNED_ENV = "ATTNPROF_CACHE_WARNED"


def folder_problem(folder: Path) -> Optional[str]:
    """Why ``folder`` must not be trusted, or None: also when it does not exist yet (it
    will be created private) or cannot be reached at all (then reading and writing fail on
    their own, with their own warning). Symbolic links are followed: the target is judged (``usable``
    refuses a link below the cache's root before that)."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_mode & OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        return f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def not_a_folder(folder: Path) -> Optional[str]:
    """Why ``folder`` can hold no cache entries at all, or None: a file (or anything but a
    folder) where it goes, or a file where one of the folders above it goes. A folder not
    made yet is no problem (it will be created)."""
    try:
        info = os.stat(folder)
    except NotADirectoryError:
        return "under a file, not a folder"
    except OSError:
        return None
    return None if stat.S_ISDIR(info.st_mode) else "a file, not a folder"


def judge(root: Path, where: Path) -> tuple[Optional[str], Optional[str]]:
    """(why ``where`` can hold no cache entries, why it is not the user's own), both None when
    it may be used: ``not_a_folder``, a link below the cache's ``root`` (the root is the user's
    choice and followed; a link inside the cache is planted: entries would land in its target),
    then ``folder_problem``."""
    shape = not_a_folder(where)
    if Path(where) != Path(root) and os.path.islink(where):
        shape = "a symbolic link (a folder inside the cache is never followed: entries would be written elsewhere)"
    return shape, (folder_problem(where) if shape is None else None)


def usable(root: Path, folder: Path, warn: Optional[Callable[[str], None]] = None,
           elsewhere: str = "choose a folder of your own") -> bool:
    """Whether the cache may read and write ``folder``: it and the cache's ``root`` (the one
    above every cache folder) are folders (``not_a_folder``) and pass ``folder_problem``.
    Else one warning (``warn``, or stderr; ``elsewhere``: how to point the cache at another
    folder), once per folder: an unusable root is said once for every cache below it."""
    for where in dict.fromkeys((Path(root), Path(folder))):
        shape, owner = judge(root, where)
        if shape is None and owner is None:
            continue
        if os.environ.get(WARNED_ENV) != str(where):
            os.environ[WARNED_ENV] = str(where)
            line = (f"warning: cache folder {where} is {shape}: nothing is cached there, every figure is "
                    f"computed again each time (remove what is in the way, or {elsewhere})" if shape else
                    f"warning: cache folder {where} is {owner}: another user could plant figures there, so "
                    f"it is neither read nor written and predictions are computed uncached (chmod go-w it, or "
                    f"{elsewhere})")
            (warn or (lambda text: print(printable(text), file=sys.stderr)))(line)  # the folder's name: one line
        return False
    return True


def own_entry(fd: int) -> bool:
    """Whether an open cache entry is this user's and writable by no one else (what a
    sticky, world-writable folder cannot guarantee by itself)."""
    info = os.fstat(fd)
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & OTHERS_WRITE


def read_entry(path: Path) -> Optional[str]:
    """An entry's text, or None when it is not ``own_entry`` (or is a symbolic link);
    FileNotFoundError when there is none, OSError/UnicodeDecodeError when unreadable."""
    read = read_entry_with_id(path)
    return None if read is None else read[0].decode("utf-8")


def read_entry_with_id(path: Path) -> Optional[tuple[bytes, tuple]]:
    """An entry's bytes and the (device, inode) of the file they were read from (so that the
    file, and not whatever holds its name later, is what a caller moves aside), or None as
    ``read_entry``; FileNotFoundError when there is none, OSError when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link where an entry goes: not ours to follow
            return None
        raise
    with os.fdopen(fd, "rb") as entry:
        if not own_entry(fd):
            return None
        info = os.fstat(fd)
        return entry.read(), (info.st_dev, info.st_ino)


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and any missing parents with mode 0700: a cache folder attnprof
    creates is the user's alone, whatever the umask."""
    missing = []
    here = Path(folder)
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
