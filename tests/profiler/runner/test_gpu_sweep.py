"""The first GPU run: a real one-point ``--device cuda`` sweep, as a user runs it, must end
``ok`` with allocator figures and the SDPA kernel torch ran. Skipped without a GPU;
scripts/gpu_check.sh runs it on the lent machine (stage gpu-tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attnprof.profiler.gpumeasure import devices

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not devices.cuda_available(), reason="needs a CUDA device")]


def test_a_one_point_cuda_sweep_ends_ok(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "attnprof", "sweep", "--device", "cuda", "--variant", "sdpa",
                           "--mode", "plain", "--min-len", "1024", "--max-len", "1024", "--d-model", "256",
                           "--heads", "4", "--layers", "1", "--dtype", "bf16", "--repeats", "2", "--warmup", "1",
                           "--no-report", "--quiet", "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record["reason"]
    assert record["measured_by"] == "cuda-allocator" and record["measured_peak_bytes"] > 0
    assert record["gpu_sdpa_backend_measured"] in ("flash", "efficient", "cudnn", "math")
    assert record["device"] == "cuda" and record["device_name"]
