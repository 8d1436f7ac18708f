"""The GPU memory model end to end: invariants, fits, `predict --gpu` records, tables and budget."""

import json

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS, TraceCache, gpu_memory
from attnprof.profiler.predict.gpu_points import predict_gpu
from attnprof.profiler.hardware.gpus import ENV_VAR, get_gpu
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV

runner = CliRunner()


@pytest.fixture(autouse=True)
def defaults(monkeypatch):
    for var in (ENV_VAR, "ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", *BLAS_ENV):
        monkeypatch.delenv(var, raising=False)


def _point(variant="sdpa", scope="model", mode="plain", n=1024, dtype="bfloat16", heads=2, d_model=128, layers=2,
           forward_only=False):
    return Point(variant, mode, scope, Shape(seq_len=n, batch=1, d_model=d_model, heads=heads, layers=layers,
                                             dtype=dtype), forward_only)


POINTS = [_point(), _point(dtype="float32"), _point(mode="checkpoint"), _point(mode="reversible", dtype="float32"),
          _point("full", n=512), _point("sdpa", "attention", "none", dtype="float32"),
          _point("sdpa", forward_only=True, dtype="float32"), _point("sdpa", dtype="float64", n=512)]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p.variant}-{p.scope}-{p.mode}-{p.shape.dtype}"
                                                        f"{'-fwd' if p.forward_only else ''}")
def test_tensor_le_allocated_le_reserved_le_total(point):
    cache = TraceCache()
    for key in ("a100-40gb", "h100-sxm", "l4"):
        gpu = get_gpu(key)
        r = predict_gpu(point, gpu, cache)
        assert 0 < r.tensor_peak_bytes <= r.allocated_peak_bytes <= r.reserved_peak_bytes <= r.total_bytes
        assert r.total_bytes == gpu.context_bytes + r.reserved_peak_bytes and r.fits
        assert r.traced_peak_bytes == predict(on_device(point, "cuda"), exact=True, count_flops=False).peak_bytes
        assert r.allocated_peak_bytes - r.tensor_peak_bytes < 512 * 4096  # rounding: < 512 B per block
        assert r.reserved_peak_bytes % (2 << 20) == 0  # segments: multiples of 2 MiB
        # matmuls in forward, and in backward (autograd's thread): one cuBLAS workspace each
        assert r.cublas_workspaces == (1 if point.forward_only or point.scope == "attention" else 2) * (
            point.scope == "model")
    assert predict_gpu(point, get_gpu("a100-40gb"), cache).sdpa_backend == (
        "" if point.variant == "full" else {"bfloat16": "flash", "float32": "efficient", "float64": "math"}[
            point.shape.dtype])


def test_the_h100_uses_a_bigger_cublas_workspace_and_cudnn():
    point = _point()
    a100, h100 = predict_gpu(point, get_gpu("a100-80gb")), predict_gpu(point, get_gpu("h100-sxm"))
    assert (a100.sdpa_backend, h100.sdpa_backend) == ("flash", "cudnn")
    assert h100.cublas_workspace_bytes == 32 << 20 and a100.cublas_workspace_bytes == 8_519_680
    assert h100.tensor_peak_bytes > a100.tensor_peak_bytes + 2 * (32 << 20) - 2 * 8_519_680 - (1 << 20)


def test_a_point_too_big_for_a_gpu_does_not_fit_and_reports_what_it_would_need():
    # full attention at 64K, fp32, one head: 16 GiB of scores and 16 GiB of softmax
    point = Point("full", "none", "attention", Shape(seq_len=65536, batch=1, d_model=64, heads=1, dtype="float32"),
                  forward_only=True)
    cache = TraceCache()
    l4, h200 = predict_gpu(point, get_gpu("l4"), cache), predict_gpu(point, get_gpu("h200"), cache)
    assert not l4.fits and l4.total_bytes > get_gpu("l4").memory_bytes
    assert any("out of memory" in n for n in l4.notes)
    assert h200.fits and h200.total_bytes <= get_gpu("h200").memory_bytes
    # the same allocations but the cuBLAS workspace (8.1 MiB on sm89, 32 MiB on sm90)
    assert h200.reserved_peak_bytes - l4.reserved_peak_bytes == (32 << 20) - (20 << 20)  # its segments: 32 vs 20 MiB
    assert l4.reserved_peak_bytes >= 32 << 30


def test_a_budget_below_the_gpu_caps_the_allocator():
    """As set_per_process_memory_fraction: PyTorch frees its cached segments and retries at
    the budget, so a step whose uncapped cache passes the budget may still fit within it."""
    gpu = get_gpu("l4")
    point = _point("full", mode="checkpoint", n=2048, dtype="float32", heads=2, d_model=128, layers=4)
    free = gpu_memory(point, gpu)
    assert free.fits and free.reserved_peak_bytes > free.allocated_peak_bytes + (16 << 20)  # a cache to release
    budget = free.total_bytes - 1
    capped = gpu_memory(point, gpu, limit_bytes=budget)
    assert capped.fits and capped.total_bytes <= budget
    assert any("capped at the budget" in n for n in capped.notes)
    assert any("fits only by releasing cached segments" in n for n in capped.notes)
    short = gpu_memory(point, gpu, limit_bytes=gpu.context_bytes + free.tensor_peak_bytes)  # below what it holds
    assert not short.fits and any("out of memory" in n for n in short.notes)
    above = gpu_memory(point, gpu, limit_bytes=gpu.memory_bytes + 1)  # a budget above the GPU changes nothing
    assert (above.total_bytes, above.notes) == (free.total_bytes, free.notes)


def test_predict_with_gpus_gives_one_record_per_point_and_gpu():
    result = api.predict(variants="sdpa,full", modes="plain", seq_lens=[512, 1024], d_model=64, heads=2, layers=1,
                         dtype="bf16", gpus=["l4", "H200"])
    assert result.gpus == ["l4", "h200"] and len(result.records) == 2 * 2 * 2
    for r in result.records:
        assert set(GPU_FIELDS) <= set(r) and r["gpu"] in ("l4", "h200")
        assert r["predicted_peak_bytes"] <= r["gpu_allocated_peak_bytes"] <= r["gpu_reserved_peak_bytes"] \
            <= r["gpu_total_bytes"]
        PointRecord.from_dict(r)  # the record's fields are PointRecord's
    table = result.table()
    model_part = table.split("\n\n", 1)[1]
    assert "GPU memory MODEL (predicted" in model_part and "allocated" in model_part
    assert "allocated" not in table.split("\n\n", 1)[0]  # the fake-tensor table has no model column
    assert table.count("\nsdpa ") == 2 + 4  # 2 points above, 2 points x 2 GPUs below


def test_predict_budget_with_a_gpu_finds_the_longest_length_that_fits_it():
    rows = api.predict(variants="full", modes="plain", d_model=64, heads=2, layers=1, dtype="float32",
                       budget="6GiB", gpus=["l4", "h100-sxm"], min_len=1024, max_len=65536).records
    assert [r["gpu"] for r in rows] == ["l4", "h100-sxm"]
    for r in rows:
        gpu = get_gpu(r["gpu"])
        n = r["longest_fitting_seq_len"]
        assert r["limit_bytes"] == 6 << 30 and r["gpu_total_bytes"] <= 6 << 30
        at = _point("full", n=n, dtype="float32", heads=2, d_model=64, layers=1)
        assert predict_gpu(at, gpu).total_bytes == r["gpu_total_bytes"]
        assert predict_gpu(_point("full", n=2 * n, dtype="float32", heads=2, d_model=64, layers=1),
                           gpu).total_bytes > 6 << 30
        assert "model" in r["limited_by"]
    # the budget above the GPU's memory: the GPU's memory is the limit
    rows = api.predict(variants="full", modes="plain", d_model=64, heads=2, layers=1, dtype="float32",
                       budget="1TiB", gpus=["l4"], min_len=1024, max_len=1 << 17).records
    assert rows[0]["limit_bytes"] == get_gpu("l4").memory_bytes and rows[0]["gpu_fits"]


def test_cli_predict_gpu_json_and_table():
    args = ["predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "1024", "--d-model", "64", "--heads", "2",
            "--layers", "1", "--dtype", "bf16", "--gpu", "a100-80gb", "--gpu", "h100-pcie"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["gpu"] for r in rows] == ["a100-80gb", "h100-pcie"]
    assert all(r["gpu_fits"] and r["gpu_sdpa_backend"] in ("flash", "cudnn") for r in rows)
    table = runner.invoke(app, args).output
    assert "GPU memory MODEL (predicted" in table and "model note:" in table
    budget = runner.invoke(app, ["predict", "--variant", "sdpa", "--mode", "plain", "--d-model", "64", "--heads", "2",
                                 "--layers", "1", "--dtype", "bf16", "--gpu", "l4", "--budget", "64MiB", "--min-len",
                                 "256", "--max-len", "4096"])  # no --seq-len: the budget searches the lengths
    assert budget.exit_code == 0, budget.output
    assert "modelled GPU total fits" in budget.output and "l4" in budget.output
