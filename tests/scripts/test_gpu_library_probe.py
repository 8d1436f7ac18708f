"""scripts/gpu_library_probe.py: each CUDA library's memory outside the caching allocator, step by
step (run here on the CPU: the script's steps and file, not the GPU's figures)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_library_probe.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_library_probe", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_cpu_run_runs_every_step_and_skips_the_cuda_kernels(tmp_path):
    out = tmp_path / "lib.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "HEADLINE: outside the allocator: no figures (cpu)"
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and "MEASURED" in doc["what"] and "not modelled" in doc["what"]
    steps = doc["steps"]
    assert steps[0]["step"] == "context" and len(steps) == 13
    assert not [s for s in steps if "error" in s]  # every op this script runs works, on the CPU too
    assert [s["step"] for s in steps if s.get("skipped")] == [s["step"] for s in steps if "attention" in s["step"]]


def test_the_headline_names_what_each_step_added_and_what_failed():
    doc = {"device": "cuda", "steps": [
        {"step": "context", "outside_allocator_bytes": 520 << 20, "added_outside_bytes": None},
        {"step": "elementwise (add, mul; fp32 and bf16)", "outside_allocator_bytes": 522 << 20,
         "added_outside_bytes": 2 << 20},
        {"step": "reductions (column sum, full sum)", "outside_allocator_bytes": 522 << 20, "added_outside_bytes": 0},
        {"step": "cuBLAS: mm bf16 (forward thread)", "outside_allocator_bytes": 740 << 20,
         "added_outside_bytes": 218 << 20},
        {"step": "flash attention bf16, forward and backward", "error": "RuntimeError: no kernel"}]}
    assert _module().headline(doc) == ("outside the allocator: context 520 MiB, elementwise +2 MiB, "
                                       "cuBLAS +218 MiB, flash attention bf16, forward and backward failed")


def test_no_cuda_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--device cpu" in r.stderr
