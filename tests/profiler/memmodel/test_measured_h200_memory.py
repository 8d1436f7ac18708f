"""The GPU memory model against the 23 points measured on a real H200 (issue 39, item 3: memory).

The points (inputs and MEASURED figures only, their source named) are
tests/data/h200-2026-12-04/points.json; each is predicted here with the GPU memory model
(``predict/measured_gpu.compare``, ~5 s for all) and measured / model is held to the bounds the
model reaches today, so no later change drifts from the GPU unseen. Where the issue's bounds
(allocated +-3%, reserved and NVML total +-10%) are not reached on every point, the bound here is
the honest one reached, tighter than before issue 39 (allocated 0.932..1.324, reserved
0.966..1.385, NVML total 1.016..1.442), and the issue's bound is asserted on the points that
reach it. docs/gpu.md ("Checked against a real H200") lists what is still unexplained.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.predict.measured_gpu import compare, load_measured

DATA = Path(__file__).resolve().parents[2] / "data" / "h200-2026-12-04" / "points.json"


@pytest.fixture(scope="module")
def rows(monkeypatch_module):
    env, measured = load_measured(DATA)
    return compare(measured, get_gpu(env["gpu_table_key"]))


@pytest.fixture(scope="module")
def monkeypatch_module():
    """The model honours these where it runs: the measured run had none of them set."""
    mp = pytest.MonkeyPatch()
    for name in ("ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", "CUBLAS_WORKSPACE_CONFIG"):
        mp.delenv(name, raising=False)
    yield mp
    mp.undo()


def _ratios(rows, key, where=lambda r: True):
    return {r["point"] + " " + r["source"][:5]: r[key] for r in rows if where(r) and r[key] is not None}


def test_every_point_is_predicted_with_the_kernel_torch_ran(rows):
    assert len(rows) == 23
    assert all(r["sdpa_backend_model"] == r["sdpa_backend_measured"] for r in rows)


def test_materialised_attention_is_within_one_percent(rows):
    """The eight `full` points: softmax_backward_cuda_out's grad * output temporary and
    layer_norm_cuda's float32 mean/rstd (profiler/memmodel/cuda_ops.py) were the whole gap
    (1.21..1.32 before); allocated and reserved now within 1% (the issue asks 3% and 10%)."""
    full = lambda r: r["point"].startswith("full ")  # noqa: E731
    for key in ("allocated_ratio", "reserved_ratio"):
        ratios = _ratios(rows, key, full)
        assert len(ratios) == 8
        assert all(0.99 <= v <= 1.01 for v in ratios.values()), (key, ratios)
    totals = _ratios(rows, "total_ratio", full)
    assert all(1.0 <= v <= 1.10 for v in totals.values()), totals  # the NVML bound, on these eight


def test_scope_attention_is_exact_to_half_a_percent(rows):
    """The four scope-attention points (cuDNN bf16 4K and 16K, memory-efficient fp32 4K, full
    bf16 4K): with the projections the module holds on the device (memmodel/trace.py
    ``held_parameters``) and cuDNN's grad_out rule, allocated and reserved match (the issue
    asks 3% and 10%); this also checks the cuDNN backward workspace assumption at two lengths."""
    attention = lambda r: " attention " in r["point"]  # noqa: E731
    for key in ("allocated_ratio", "reserved_ratio"):
        ratios = _ratios(rows, key, attention)
        assert len(ratios) == 4 and all(0.995 <= v <= 1.005 for v in ratios.values()), (key, ratios)


def test_allocated_never_above_measured_and_within_the_reached_bounds(rows):
    """The model never promises more than the GPU used here (measured / model >= 1 within
    0.5%), no point is off by more than 24% (was 32%), and the median is within 1%."""
    ratios = _ratios(rows, "allocated_ratio")
    assert len(ratios) == 23
    assert all(0.995 <= v <= 1.24 for v in ratios.values()), ratios
    assert statistics.median(ratios.values()) <= 1.01
    assert sum(abs(v - 1) <= 0.03 for v in ratios.values()) >= 14  # the bound, reached on 14 of 23


def test_reserved_and_nvml_total_within_the_reached_bounds(rows):
    reserved, total = _ratios(rows, "reserved_ratio"), _ratios(rows, "total_ratio")
    assert all(0.995 <= v <= 1.39 for v in reserved.values()), reserved
    assert statistics.median(reserved.values()) <= 1.13  # 1.195 before
    assert all(1.0 <= v <= 1.44 for v in total.values()), total
    assert statistics.median(total.values()) <= 1.21  # 1.259 before
