"""A writable matplotlib config folder, chosen before matplotlib is imported.

matplotlib keeps its config and font cache under ``~/.config/matplotlib`` and
``~/.cache/matplotlib``. When HOME is read-only (a CI sandbox, a container), it warns in
three log lines on stderr and falls back to a temporary folder of its own. A report
prints nothing but its own output, so that case is decided here: matplotlib's own
folders when it can create and write them, else a private temporary folder (0700,
removed at exit) through MPLCONFIGDIR. A MPLCONFIGDIR the user set is left alone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _writable(folder: Path) -> bool:
    """What matplotlib checks: the folder can be made, and is a writable folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK)


def _default_folders() -> list[Path]:
    home = Path(os.path.expanduser("~"))
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    if sys.platform.startswith(("linux", "freebsd")):
        return [config / "matplotlib", cache / "matplotlib"]
    return [home / ".matplotlib"]


def ensure_config_dir() -> None:
    """Set MPLCONFIGDIR to a private temporary folder when matplotlib's would be unwritable."""
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules:
        return
    try:
        if all(_writable(folder) for folder in _default_folders()):
            return
    except (RuntimeError, OSError, ValueError):  # no home folder at all
        pass
    private = tempfile.mkdtemp(prefix="attnprof-matplotlib-")
    atexit.register(_remove, private, os.getpid())
    os.environ["MPLCONFIGDIR"] = private


def _remove(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that happens to exit through atexit
        shutil.rmtree(folder, ignore_errors=True)
