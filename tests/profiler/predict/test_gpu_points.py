"""The GPU model over many points (profiler/predict/gpu_points.py): the record's gpu_*
fields come from GpuPrediction itself, the one search finds the exact boundary of a
synthetic model, and the same search serves the CPU's fake-tensor peaks."""

from __future__ import annotations

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS, GpuPrediction
from attnprof.profiler.predict import gpu_points, points, search
from attnprof.profiler.timemodel.fields import GPU_TIME_FIELDS
from attnprof.scenarios.scenario import Scenario

SCENARIO = Scenario(name="t", variants=("full",), scope="attention", seq_lens=(256,), d_model=64, heads=4, layers=1)


def test_gpu_fields_are_the_dataclass_fields_in_order():
    assert GPU_FIELDS[:8] == ("gpu", "gpu_sdpa_backend", "gpu_tensor_peak_bytes", "gpu_allocated_peak_bytes",
                              "gpu_reserved_peak_bytes", "gpu_total_bytes", "gpu_fits", "gpu_note")
    assert GPU_FIELDS[8:] == GPU_TIME_FIELDS  # the time model's names, one copy each
    p = GpuPrediction("l4", "flash", "why", 1, 2, 3, 4, 7, True, 100, 1, notes=["a", "b"],
                      times={"gpu_time_fwd_ms": 1.0})
    fields = p.fields()
    assert tuple(fields) == GPU_FIELDS
    assert fields["gpu_note"] == "a; b" and fields["gpu_time_bwd_ms"] is None and fields["gpu_total_bytes"] == 7


def _counting(monkeypatch, module) -> list:
    """Count the searches ``module`` runs through the one search."""
    used = []
    original = search.longest_index

    def counted(count, fits, *args):
        used.append(count)
        return original(count, fits, *args)

    monkeypatch.setattr(module, "longest_index", counted)
    return used


def test_the_gpu_search_finds_the_exact_boundary_of_a_synthetic_model(monkeypatch):
    gpu = get_gpu("l4")
    boundary = 4096

    limits = set()

    def model(point, g, cache=None, limit_bytes=None):  # fits up to `boundary` tokens, a total that grows with n
        limits.add(limit_bytes)
        n = point.shape.seq_len
        total = n * 1000 if n <= boundary else gpu.memory_bytes + n
        return GpuPrediction(g.key, "", "", n, n, n, 0, total, True, g.memory_bytes, n)

    monkeypatch.setattr(gpu_points, "predict_gpu", model)
    monkeypatch.setattr(gpu_points, "spread", lambda fn, jobs: [fn(j) for j in jobs])
    used = _counting(monkeypatch, gpu_points)
    rows = gpu_points.gpu_longest_fitting(SCENARIO, [gpu], None, start=16, limit=1 << 16)
    assert [r["longest_fitting_seq_len"] for r in rows] == [boundary] and used == [13]
    assert rows[0]["limited_by"].startswith(f"{2 * boundary} tokens would need")
    assert rows[0]["gpu_checked"] == "not checked on a real GPU: l4 was never measured (measured: h200)"
    assert limits == {None}
    gpu_points.gpu_longest_fitting(SCENARIO, [gpu], 1 << 30, start=16, limit=1 << 16)
    assert limits == {None, 1 << 30}  # a budget caps the model's allocator (gpu_peak.gpu_memory)


def test_the_same_search_serves_the_cpu_peaks(monkeypatch):
    class Acc:
        def __init__(self, n):
            self.peak_bytes = n * n

    monkeypatch.setattr(points, "predict", lambda point, count_flops=True: Acc(point.shape.seq_len))
    monkeypatch.setattr(points, "spread", lambda fn, jobs, **kw: [fn(j) for j in jobs])
    used = _counting(monkeypatch, points)
    got = points.capacity_predictions(SCENARIO, (1 / 1024,), start=16, limit=1 << 16)  # 1 MiB: n = 1024 fits
    lengths = sorted(got.values())
    assert used == [13] and (1024 * 1024) in lengths and (2048 * 2048) in lengths


@pytest.mark.parametrize("boundary", [15, 16, 100, 1 << 16])
def test_the_cpu_search_on_a_synthetic_peak(monkeypatch, boundary):
    class Acc:
        def __init__(self, n):
            self.peak_bytes = n

    monkeypatch.setattr(points, "predict", lambda point, count_flops=True: Acc(point.shape.seq_len))
    monkeypatch.setattr(points, "spread", lambda fn, jobs, **kw: [fn(j) for j in jobs])
    got = points.capacity_predictions(SCENARIO, (boundary / 2**30,), start=16, limit=1 << 16)
    known = sorted(got.values())
    fitting = [n for n in (16 << i for i in range(13)) if n <= boundary]
    if fitting:
        assert fitting[-1] in known
    if not fitting or fitting[-1] < 1 << 16:
        assert (fitting[-1] * 2 if fitting else 16) in known


def test_each_record_says_how_sure_the_model_is_for_its_point_and_gpu(monkeypatch):
    from attnprof.profiler.hardware.checked import how_sure
    from attnprof.profiler.records import Point, Shape

    def model(point, g, cache=None, limit_bytes=None):
        return GpuPrediction(g.key, "", "", 1, 1, 1, 0, 1, True, g.memory_bytes, 1)

    monkeypatch.setattr(gpu_points, "predict_gpu", model)
    monkeypatch.setattr(gpu_points, "spread", lambda fn, jobs: [fn(j) for j in jobs])
    shape = Shape(seq_len=4096, batch=1, d_model=1024, heads=16, layers=2, dtype="bfloat16")
    done, failed = Point("sdpa", "plain", "model", shape), Point("full", "plain", "model", shape)
    records = [{**p.identity(), "status": s} for p, s in ((done, "ok"), (failed, "oom"))]
    gpus = [get_gpu("h200"), get_gpu("l4")]
    out = gpu_points.add_gpu_fields(records, [done, failed], gpus)
    assert [r["gpu_checked"] for r in out] == [how_sure(done.identity(), g) for g in gpus] + ["", ""]
    assert out[0]["gpu_checked"].startswith("checked on a real NVIDIA H200")


def test_predict_gpu_says_how_sure_in_its_json_and_under_its_table(monkeypatch):
    import json

    from typer.testing import CliRunner

    from attnprof.cli import app
    from attnprof.profiler.hardware.gpus import ENV_VAR

    monkeypatch.delenv(ENV_VAR, raising=False)
    args = ["predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "1024", "--d-model", "64", "--heads", "2",
            "--layers", "1", "--dtype", "bf16", "--gpu", "h200", "--gpu", "l4"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    h200, l4 = json.loads(result.stdout)
    assert h200["gpu_checked"].startswith("checked on a real NVIDIA H200")
    assert h200["gpu_checked"].endswith("this point's seq_len, d_model, heads, layers, d_ff not among those measured")
    assert l4["gpu_checked"] == "not checked on a real GPU: l4 was never measured (measured: h200)"
    table = CliRunner().invoke(app, args).stdout.splitlines()
    assert table[-2:] == [f"how sure, h200: {h200['gpu_checked']}", f"how sure, l4: {l4['gpu_checked']}"]
