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


NO_COMPILER_ON_CUDA = r"""
from attnprof.profiler.measure.fakemode import is_real_dynamo_loaded
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.runner.worker import measure_point

for mode, extra in (("plain", {}), ("checkpoint", {"optimizer": "adamw", "autocast": "bfloat16"}),
                    ("reversible", {"kv_heads": 2})):
    shape = Shape(seq_len=1024, d_model=256, heads=4, layers=2, **extra)
    record = measure_point(Point("sdpa", mode, "model", shape), {"device": "cuda", "warmup": 1, "repeats": 2})
    print(mode, record.status, record.measured_by, (record.reason or "")[:200])
print("compiler imported:", is_real_dynamo_loaded())
"""


def test_cuda_points_import_no_compiler(tmp_path):
    """The worker's passes run under fakemode.light_dynamo (worker.measure_point): on a GPU too
    (the SDPA spy, checkpoint, AdamW, autocast, the backward's device thread) nothing needs the real
    torch._dynamo, whose import (with triton) each CUDA worker paid before."""
    import os

    done = subprocess.run([sys.executable, "-c", NO_COMPILER_ON_CUDA], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split()[:3] for line in lines[:3]] == [[mode, "ok", "cuda-allocator"]
                                                        for mode in ("plain", "checkpoint", "reversible")], lines
    assert lines[3] == "compiler imported: False"
