"""Writing into a folder someone else may have prepared, without writing through it.

A run folder is data: it may come from another person, with ``report.html`` or
``.sweep.lock`` planted as a symbolic link to ``~/.bashrc``. ``open(path, "w")`` follows
such a link and overwrites its target. Every file attnprof writes into a run folder goes
through this module instead:

- ``write_atomic``: the bytes go to ``NAME.tmp``, created with O_EXCL | O_NOFOLLOW, then
  ``os.replace`` renames it over NAME (which replaces a link or a hard link itself, never
  its target); a NAME or NAME.tmp that is a link is refused first, as a planted trap;
- ``open_append`` and ``open_lock``: O_NOFOLLOW | O_NONBLOCK, and the file must be a
  regular file with one name (a hard link to a file outside would be written through);
- ``read_bounded``: a render cache read without following a link, without blocking on a
  FIFO and without reading more than a bound;
- ``move_aside``: a file attnprof cannot read back is renamed beside itself, never deleted.

A refused link is ``LinkRefused``: a ``UserError`` (one line, exit 2), never an OSError,
so no caller's "the folder is read-only, carry on" handler can swallow it. Storage checks
made before any work (``check_folder_writable``) raise ``UnwritablePath``, also exit 2; for a
place the user named (``--out``, ``--output``, ``--json-out``, ``--timeline DIR``) they also make
something there and remove it (``probe``), since root passes permission bits that ``/proc``
does not honour.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Optional

from attnprof.errors import UserError

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PATH_MAX = 4096
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class LinkRefused(UserError):
    """A file attnprof would write (or read as its own cache) is a symbolic link, a hard
    link or not a regular file: refused, nothing written through it."""


class UnwritablePath(UserError):
    """A folder or file attnprof must write cannot be written (checked before any work)."""


def _refuse(path: Path, what: str) -> LinkRefused:
    return LinkRefused(f"{path} is {what}; attnprof never writes through it (a run folder is data): "
                       f"remove it and run again")


def refuse_link(path: Path, opened: bool = False) -> None:
    """LinkRefused when ``path`` exists and is a symbolic link; nothing when it is absent.
    ``opened``: a file that will be appended to or locked in place (not replaced), which
    must also be a regular file with one name."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG):
            return  # the write that follows says so
        raise
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "a symbolic link")
    if opened and not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "not a regular file")
    if opened and info.st_nlink > 1:
        raise _refuse(path, f"a hard link ({info.st_nlink} names for one file)")


def make_folder(folder: Path, *, parents: bool = False) -> Path:
    """``folder``, created if absent (with its parents when ``parents``); LinkRefused when it
    is a symbolic link or anything but a folder (files written into a planted link to a
    folder would land outside the run), UnwritablePath when it cannot be made, in one line."""
    folder = Path(folder)
    refuse_link(folder)
    try:
        (folder.mkdir(parents=True, exist_ok=True) if parents else os.mkdir(folder, 0o755))
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnwritablePath(f"cannot make the folder {_short(folder)}: {exc.strerror or exc}") from None
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _refuse(folder, "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder")
    return folder


ASIDE = ".unreadable-"  # the mark of a file moved aside (``move_aside``)


class Replaced(OSError):
    """The name no longer holds the file that was read (another process moved it aside, or
    wrote a fresh one there): nothing is moved."""


def _identity(path: Path) -> tuple:
    info = os.stat(path, follow_symlinks=False)
    return info.st_dev, info.st_ino


def move_aside(path: Path, identity: Optional[tuple] = None) -> Path:
    """Give ``path`` (a file attnprof wrote but cannot read back: a cache entry, a render cache)
    a name of its own beside it, ``NAME.unreadable-<UTC time>-<pid>[-k]``, and return it: kept
    byte for byte for the user to look at, never deleted, never overwritten. A hard link to the
    new name, then the old name removed, so no other file is ever replaced (a rename would
    clobber a name made meanwhile); a link at ``path`` is moved as a link, never followed.
    ``identity`` ((device, inode) of the file that was read): ``Replaced`` when the name holds
    another file by then, so a process never moves aside a fresh file another one just wrote.
    OSError when it cannot be done (the caller then leaves the file where it is)."""
    import time

    path = Path(path)
    stem = f"{path.name}{ASIDE}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    for k in range(100):
        target = path.with_name(stem + (f"-{k}" if k else ""))
        if identity is not None and _identity(path) != identity:
            raise Replaced(errno.ESTALE, f"{path} is no longer the file that was read")
        try:
            os.link(path, target, follow_symlinks=False)
        except FileExistsError:
            continue
        if identity is not None and _identity(target) != identity:  # replaced between the check and the link
            os.unlink(target)
            raise Replaced(errno.ESTALE, f"{path} is no longer the file that was read")
        if identity is None or _identity(path) == identity:
            os.unlink(path)
        return target
    raise OSError(errno.EEXIST, f"no free name beside {path}")


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` all at once: a reader sees the old file or the new one.

    ``durable`` fsyncs the file before the rename (records a kill must not lose). OSError
    for a folder that cannot be written; LinkRefused for a planted link.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    refuse_link(path)
    refuse_link(tmp)
    try:
        if stat.S_ISREG(os.lstat(tmp).st_mode):
            os.unlink(tmp)  # a regular leftover of a write that was killed: ours to remove
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        refuse_link(path)  # planted while we wrote: still never followed (replace renames over it)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _checked_fd(path: Path, flags: int, mode: int = 0o644, one_name: bool = True) -> int:
    """An fd of a regular file at ``path`` (with one name, for writing), opened without
    following a link."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):  # EMLINK: BSD's word for it
            raise _refuse(path, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise _refuse(path, "not a regular file") from None
        raise
    info = os.fstat(fd)
    problem = ("not a regular file" if not stat.S_ISREG(info.st_mode) else
               f"a hard link ({info.st_nlink} names for one file)" if one_name and info.st_nlink > 1 else None)
    if problem:
        os.close(fd)
        raise _refuse(path, problem)
    return fd


def open_append(path: Path) -> int:
    """An O_APPEND fd of ``path`` (created if absent), never through a link."""
    return _checked_fd(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def open_lock(path: Path) -> int:
    """A read-write fd of a lock file (created if absent), never through a link."""
    return _checked_fd(Path(path), os.O_RDWR | os.O_CREAT)


def read_bounded(path: Path, limit: int, *, follow: bool = False) -> Optional[bytes]:
    """The bytes of ``path``; None when it is absent. LinkRefused for a symbolic link or
    anything but a regular file (a read would follow it, or block on a FIFO); ValueError
    when it is longer than ``limit``. ``follow``: a file the user named (a baseline), which
    may be a link to a regular file; still never a FIFO or a device."""
    try:
        if follow:
            fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise _refuse(Path(path), "not a regular file")
        else:
            fd = _checked_fd(Path(path), os.O_RDONLY, one_name=False)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size > limit:
            raise ValueError(f"larger than {limit} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                raise ValueError(f"larger than {limit} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)


# --- checked before any work ---------------------------------------------------------------
def _name_problem(path: Path) -> Optional[str]:
    if len(os.fsencode(str(path))) >= PATH_MAX:
        return f"its path is longer than {PATH_MAX} bytes"
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    return f"the name {long[:40]}... is longer than {NAME_MAX} bytes" if long else None


def check_folder_writable(folder: Path, what: str, probe: bool = False, shown: Optional[Path] = None) -> None:
    """UnwritablePath, in one line, unless files can be created in ``folder`` (made if need
    be): no name too long, no file where a folder belongs, the nearest existing folder
    writable and not on a read-only file system. Creates nothing, unless ``probe`` (a place
    the user named, never a path inside a run folder, which is untrusted data): permission
    bits do not say it all (root passes them, but ``/proc`` takes nothing), so a uniquely
    named folder is made in the nearest existing folder and removed again (no other
    process's name is ever touched, nothing is left). ``shown``: the path the message names
    (``check_file_writable``: the file), default ``folder``."""
    folder = Path(folder)
    shown = folder if shown is None else shown
    problem = _name_problem(folder)
    if problem:
        raise UnwritablePath(f"cannot write {what} {_short(folder)}: {problem}")
    here = folder
    while True:
        try:
            info = os.stat(here)
            break
        except (FileNotFoundError, NotADirectoryError):  # not there yet, or under a file: look higher
            if here.parent == here:
                raise UnwritablePath(f"cannot write {what} {shown}: no such folder") from None
            here = here.parent
        except OSError as exc:
            raise UnwritablePath(f"cannot write {what} {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnwritablePath(f"cannot write {what} {shown}: {here} is a file, not a folder")
    if not os.access(here, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only_fs(here) else "permission denied"
        raise UnwritablePath(f"cannot write {what} {shown}: {here} is not writable ({why})")
    if probe:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".attnprof-probe-", dir=here))
        except OSError as exc:
            raise UnwritablePath(f"cannot write {what} {shown}: nothing can be made in {here} "
                                 f"({exc.strerror or exc})") from None


def check_file_writable(path: Path, what: str, probe: bool = False) -> None:
    """``check_folder_writable`` for a file's folder, and a name that fits."""
    path = Path(path)
    problem = _name_problem(path)
    if problem:
        raise UnwritablePath(f"cannot write {what} {_short(path)}: {problem}")
    check_folder_writable(path.parent, what, probe, shown=path)


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else text[:60] + "..." + text[-40:]
