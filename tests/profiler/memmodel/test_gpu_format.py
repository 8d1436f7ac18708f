"""The GPU model's tables (profiler/memmodel/gpu_format.py): labelled a model, one line per
record, a point that was not modelled shown as dashes."""

from __future__ import annotations

from attnprof.profiler.memmodel.gpu_format import TIME_LABEL, format_gpu_budget_table, format_gpu_table
from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS, MODEL_LABEL

ROW = {"variant": "sdpa", "mode": "plain", "seq_len": 1024, "batch": 1, "gpu": "l4", "gpu_sdpa_backend": "flash",
       "gpu_tensor_peak_bytes": 1 << 20, "gpu_allocated_peak_bytes": 2 << 20, "gpu_reserved_peak_bytes": 4 << 20,
       "gpu_total_bytes": 400 << 20, "gpu_fits": True, "gpu_note": "CUDA context estimated", "gpu_time_fwd_ms": 1.5,
       "gpu_time_bwd_ms": 3.0, "gpu_tokens_per_s": 1000.0}


def test_the_point_table_is_labelled_a_model_and_lists_each_record():
    missing = {**dict.fromkeys(GPU_FIELDS), "variant": "full", "mode": "plain", "seq_len": 1, "batch": 1, "gpu": "l4"}
    lines = format_gpu_table([ROW, missing]).splitlines()
    assert lines[0].startswith(MODEL_LABEL) and TIME_LABEL in lines[0]
    assert lines[1].split()[:5] == ["variant", "mode", "seq_len", "batch", "gpu"]
    assert "flash" in lines[2] and "yes" in lines[2]
    assert lines[3].split()[5:] == ["-"] * 9
    assert lines[-1] == "model note: l4: CUDA context estimated"


def test_the_budget_table():
    row = {**ROW, "limit_bytes": 22 << 30, "longest_fitting_seq_len": 4096, "limited_by": "8192 tokens would need"}
    lines = format_gpu_budget_table([row]).splitlines()
    assert lines[0].startswith("longest power-of-two length whose modelled GPU total fits")
    assert "4096" in lines[2] and "flash" in lines[2] and lines[2].endswith("8192 tokens would need")


def test_below_each_table_how_sure_the_model_is_once_when_every_row_says_the_same():
    said = "checked on a real X: measured/model allocated 0.93-1.33"
    one = format_gpu_table([{**ROW, "gpu_checked": said}, {**ROW, "seq_len": 2048, "gpu_checked": said}])
    assert one.splitlines()[-1] == f"how sure (the GPU model against a real GPU): {said}"
    two = format_gpu_table([{**ROW, "gpu_checked": said}, {**ROW, "mode": "reversible", "gpu_checked": "not checked"}])
    assert two.splitlines()[-2:] == [f"how sure, plain: {said}", "how sure, reversible: not checked"]
    budget = {**ROW, "limit_bytes": 1, "longest_fitting_seq_len": 4096, "limited_by": "x", "gpu_checked": said}
    assert format_gpu_budget_table([budget]).splitlines()[-1].endswith(said)
