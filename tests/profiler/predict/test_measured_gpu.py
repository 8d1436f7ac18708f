"""predict/measured_gpu.py: the measured points file is read as data, and compared point by point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnprof.errors import UserError
from attnprof.profiler.predict.measured_gpu import load_measured

DATA = Path(__file__).resolve().parents[2] / "data" / "h200-2026-12-04" / "points.json"


def test_the_committed_h200_points_load_with_measured_figures_only():
    env, points = load_measured(DATA)
    assert env["device_name"] == "NVIDIA H200" and env["torch"].startswith("2.11")
    assert len(points) == 23
    assert sum(p.time_fwd_ms is not None for p in points) == 14
    assert all(p.allocated_peak_bytes > 0 and p.reserved_peak_bytes >= p.allocated_peak_bytes for p in points)
    text = DATA.read_text()
    assert "model" not in json.dumps([sorted(p) for p in json.loads(text)["points"]]).replace("\"d_model\"", "")


@pytest.mark.parametrize("bad", [{"format": "x", "points": []}, [], {"format": "attnprof-gpu-measurements"},
                                 {"format": "attnprof-gpu-measurements", "points": [{"variant": "sdpa"}]}])
def test_a_file_that_is_not_measurements_is_one_line_refusal(tmp_path, bad):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(UserError, match="^measurements: "):
        load_measured(f)


def test_a_negative_or_non_finite_figure_is_refused(tmp_path):
    doc = json.loads(DATA.read_text())
    doc["points"][0]["measured_allocated_peak_bytes"] = -1
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="whole number of bytes"):
        load_measured(f)


def test_every_identity_field_of_a_measured_point_is_honoured(tmp_path):
    """A point measured with RMSNorm, SwiGLU, grouped KV heads and an optimizer is modelled with
    them (the GPU check's measurements file keeps every identity field); one without them (the
    committed H200 points) means the defaults."""
    doc = json.loads(DATA.read_text())
    doc["points"][0].update(norm="rmsnorm", mlp="swiglu", kv_heads=4, optimizer="adamw", optimizer_impl="foreach",
                            heads=16, forward_only=False)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc))
    shape = load_measured(f)[1][0].point.shape
    assert (shape.norm, shape.mlp, shape.kv_heads, shape.optimizer, shape.optimizer_impl) == \
        ("rmsnorm", "swiglu", 4, "adamw", "foreach")
    assert load_measured(DATA)[1][0].point.shape.norm == "layernorm"
    doc["points"][0]["forward_only"] = "yes"
    f.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="forward_only"):
        load_measured(f)


def test_the_ratio_table_says_what_is_modelled_and_prints_a_missing_ratio_as_a_dash():
    from attnprof.profiler.predict.measured_gpu import ratio_lines

    row = {"point": "sdpa model plain bfloat16 n=4096", "allocated_ratio": 1.25, "reserved_ratio": None,
           "total_ratio": 1.0, "time_ratio": None, "sdpa_backend_model": "cudnn", "sdpa_backend_measured": ""}
    heading, columns, line = ratio_lines([row], "h200", source="points.json", width=40)
    assert heading.startswith("measured / MODEL on h200") and "modelled" in heading and "(points.json)" in heading
    assert columns.split() == ["point", "alloc", "resv", "nvml", "time", "sdpa", "model/measured"]
    assert line.split() == ["sdpa", "model", "plain", "bfloat16", "n=4096", "1.250", "-", "1.000", "-", "cudnn/-"]
