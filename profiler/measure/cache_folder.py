"""The cache FOLDER every persistent cache of attnprof lives in, and how an entry is
written there: ``$ATTNPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnprof``, else
``~/.cache/attnprof``; used only when it is the user's own (trust.py); entries are
written to a temporary file and renamed (``write_atomically``).

Below the prediction cache (profiler/predict/cache.py), so that the time model's
calibration cache (profiler/timemodel/machine.py) can share the folder from a lower layer.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from attnprof.profiler.measure import trust

ENV = "ATTNPROF_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnprof"


def trusted(folder: Path, warn=None) -> bool:
    """Whether ``folder`` (under ``cache_dir()``) is the user's own: trust.usable."""
    return trust.usable(cache_dir(), folder, warn, elsewhere=f"set {ENV} to a folder of your own")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it there, so a reader
    (another process, a second shell) never sees half a file; OSError when it cannot."""
    trust.make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
