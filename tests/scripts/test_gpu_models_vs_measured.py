"""scripts/gpu_models_vs_measured.py: measured / model per measured GPU point, labelled as such."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_models_vs_measured.py"


def test_the_table_says_its_figures_are_measured_over_modelled():
    """Every figure printed is a ratio of a MEASURED figure to a MODELLED one: the output says
    so before the first row, naming the GPU table entry modelled."""
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    first_row = next(i for i, line in enumerate(lines) if line.startswith("sdpa "))
    heading = " ".join(lines[:first_row])
    assert "measured / MODEL" in heading and "h200" in heading and "modelled" in heading
    assert "allocated_ratio: n=23" in r.stdout


def test_bytes_prints_measured_minus_model_per_point():
    r = subprocess.run([sys.executable, str(SCRIPT), "--bytes"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("measured - MODEL, bytes"))
    rows = [line.split() for line in lines[at + 1:at + 24]]
    assert len(rows) == 23 and all(len(row) >= 3 for row in rows)
    allocated = [row[-3] for row in rows]
    assert sum(a == "+0" for a in allocated) >= 22  # the memory model's byte-exact points (issue 39)
