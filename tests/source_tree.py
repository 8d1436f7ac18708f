"""The package's own source files, found without walking into .venv, .git or runs/: a
project .venv holds torch's thousands of files, and walking it cost the layout tests
~45 s each in CI (``Path.rglob`` cannot prune)."""

from __future__ import annotations

import os
from pathlib import Path

NOT_SOURCE = frozenset({"tests", "scripts", "docs", ".venv", ".git", "runs", "build", "dist", "__pycache__"})


def source_paths(root: Path, skip: frozenset = NOT_SOURCE) -> list[Path]:
    """Every ``*.py`` under ``root``, sorted, skipping folders named in ``skip`` or
    starting with a dot, at any depth."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in skip and not d.startswith("."))
        found += [Path(folder) / name for name in files if name.endswith(".py")]
    return sorted(found)
