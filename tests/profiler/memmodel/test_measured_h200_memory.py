"""The GPU memory model against the 23 points measured on a real H200 (issue 39, item 3: memory).

The points (inputs and MEASURED figures only, their source named) are
tests/data/h200-2026-12-04/points.json; each is predicted here with the GPU memory model
(``predict/measured_gpu.compare``, ~5 s for all) and measured / model is held to the bounds the
model reaches today, so no later change drifts from the GPU unseen. The issue's bounds for
allocated (+-3%) and reserved (+-10%) hold on every point; NVML's total (+-10%) is held to the
bound reached (before issue 39: allocated 0.932..1.324, reserved 0.966..1.385, NVML total
1.016..1.442). docs/gpu.md ("Checked against a real H200") lists what is still unexplained.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV
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
    for name in ("ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", *BLAS_ENV):
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
    assert all(1.0 <= v <= 1.10 for v in totals.values()), totals  # the issue's NVML bound, on these eight


def test_scope_attention_is_exact_to_half_a_percent(rows):
    """The four scope-attention points (cuDNN bf16 4K and 16K, memory-efficient fp32 4K, full
    bf16 4K): with the projections the module holds on the device (memmodel/trace.py
    ``held_parameters``) and cuDNN's grad_out rule, allocated and reserved match (the issue
    asks 3% and 10%); this also checks the cuDNN backward workspace assumption at two lengths."""
    attention = lambda r: " attention " in r["point"]  # noqa: E731
    for key in ("allocated_ratio", "reserved_ratio"):
        ratios = _ratios(rows, key, attention)
        assert len(ratios) == 4 and all(0.995 <= v <= 1.005 for v in ratios.values()), (key, ratios)


def test_allocated_and_reserved_meet_the_issue_bounds_on_every_point(rows):
    """Issue 39 item 1, allocated within 3% and reserved within 10%, on all 23 points. Reached
    with the cuBLASLt workspace (memmodel/blas_workspaces.py) and the reduction kernel's staging
    buffer (memmodel/cuda_reduce.py): 22 of 23 points match to the byte, one by 512 B. The model
    never promises less than the GPU used (measured / model >= 1 within 0.1%)."""
    allocated, reserved = _ratios(rows, "allocated_ratio"), _ratios(rows, "reserved_ratio")
    assert len(allocated) == len(reserved) == 23
    assert all(0.999 <= v <= 1.03 for v in allocated.values()), allocated
    assert all(0.999 <= v <= 1.10 for v in reserved.values()), reserved
    exact = sum(r["allocated_measured_bytes"] == r["allocated_model_bytes"]
                and r["reserved_measured_bytes"] == r["reserved_model_bytes"] for r in rows)
    assert exact >= 22, exact


def test_the_plain_mlp_peak_holds_the_bias_gradients_reduction_buffer(rows):
    """Where a plain-mode model's peak is the MLP's backward (sdpa, lsh, sparse_strided at
    8K/16K), the GPU held 8192 * n bytes more than the model without Reduce.cuh's staging buffer:
    now matched to the byte (before: +64 MiB at 8K, +128 MiB at 16K)."""
    plain = [r for r in rows if " model plain bfloat16 n=" in r["point"] and not r["point"].startswith("full ")]
    assert len(plain) >= 6
    assert all(r["allocated_measured_bytes"] == r["allocated_model_bytes"] for r in plain), plain


def test_nvml_total_within_the_reached_bounds(rows):
    """NVML's process total: the context plus the simulated reserved bytes. What libraries take
    outside the caching allocator (20 MiB with cuDNN attention only, 92 with memory-efficient
    attention only, 222-240 with cuBLAS) is not modelled (docs/gpu.md), so the issue's 10% is
    reached on large points only."""
    total = _ratios(rows, "total_ratio")
    assert all(1.0 <= v <= 1.25 for v in total.values()), total  # 1.44 before
    assert statistics.median(total.values()) <= 1.12  # 1.259 before issue 39
    assert sum(v <= 1.10 for v in total.values()) >= 11
