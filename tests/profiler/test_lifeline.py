"""profiler/lifeline.py: a child that outlives its parent exits at once."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_child_whose_parent_is_not_the_one_named_exits():
    code = "from attnprof.profiler.lifeline import die_with_parent; die_with_parent(-1); print('alive')"  # no pid is -1
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (1, "")


def test_a_child_of_the_parent_named_lives_on():
    code = f"from attnprof.profiler.lifeline import die_with_parent; die_with_parent({os.getpid()}); print('alive')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "alive"
