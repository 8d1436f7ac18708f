"""scripts/gpu_kernel_probe.py: the kernels of the time model's open mechanisms, timed alone
(run here on the CPU at tiny sizes: the script's shape, not the GPU's figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_kernel_probe.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_a_cpu_run_writes_every_kernel_with_its_bytes_and_the_host_costs(tmp_path):
    out = tmp_path / "probe.json"
    r = _run("--out", str(out), "--device", "cpu", "--dtype", "float32", "--lengths", "32,64", "--heads", "2",
             "--repeats", "2", "--warmup", "1", "--host-calls", "20")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and "not modelled" in doc["what"]
    names = [(k["kernel"], k["n"]) for k in doc["kernels"]]
    kinds = ("clone", "masked_fill", "softmax_fwd", "softmax_fwd_masked", "softmax_bwd", "bmm_qk")
    assert names == [(k, n) for n in (32, 64) for k in kinds]
    clone = doc["kernels"][0]
    assert clone["bytes"] == 2 * 2 * 32 * 32 * 4 and clone["time_ms"] > 0 and clone["bytes_per_s"] > 0
    assert doc["kernels"][5]["flops"] == 2 * 2 * 32 * 32 * 64
    assert [h["op"] for h in doc["host"]] == ["add_ (1 element)", "nn.Linear(8, 8) forward"]
    assert all(h["host_us_per_call"] > 0 for h in doc["host"])


def test_bad_lengths_are_one_line_and_exit_2(tmp_path):
    r = _run("--out", str(tmp_path / "p.json"), "--device", "cpu", "--lengths", "12a")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--lengths" in r.stderr
    r = _run("--out", str(tmp_path / "p.json"), "--device", "cpu", "--lengths", "0")
    assert r.returncode == 2 and "at least 1" in r.stderr
