"""A writable matplotlib folder, chosen before matplotlib is imported (reports/mplconfig.py):
matplotlib's own folders when they can be written, else a private temporary folder through
MPLCONFIGDIR, removed at exit; a MPLCONFIGDIR the user set is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHOW = "import os, attnprof.reports; print(os.environ.get('MPLCONFIGDIR') or '-')"


def run_with(home: Path, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    done = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, timeout=60,
                          env={**clean, "HOME": str(home), **env})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


def test_a_writable_home_keeps_matplotlibs_own_folders(tmp_path):
    assert run_with(tmp_path) == "-"
    assert (tmp_path / ".config" / "matplotlib").is_dir() and (tmp_path / ".cache" / "matplotlib").is_dir()


def test_an_unwritable_home_gets_a_private_folder_removed_at_exit(tmp_path):
    home = tmp_path / "not-a-folder"
    home.write_text("")  # nothing can be made under it
    private = run_with(home)
    assert private != "-" and Path(private).name.startswith("attnprof-matplotlib-")
    assert not Path(private).exists()  # removed when the process ended


def test_the_users_own_folder_is_left_alone(tmp_path):
    home = tmp_path / "not-a-folder"
    home.write_text("")
    assert run_with(home, MPLCONFIGDIR=str(tmp_path / "mine")) == str(tmp_path / "mine")
