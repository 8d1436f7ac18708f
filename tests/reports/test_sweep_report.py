"""A real sweep's folder, rendered: the fixture folders of the other tests stand in for
exactly this (same record API, same manifest layout)."""

import pytest

from attnprof.profiler.runner import sweep
from attnprof.reports.render import render_report
from attnprof.scenarios.scenario import Scenario

SMALL = Scenario(name="small", variants=("sdpa", "lsh[n_hashes=2]"), modes=("plain", "checkpoint"), min_len=64,
                 max_len=128, d_model=32, heads=2, layers=1, repeats=1, warmup=0)


@pytest.mark.slow
def test_a_small_real_sweep_renders(tmp_path):
    settings = sweep.SweepSettings(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook="")
    sweep.run_sweep(SMALL, tmp_path / "run", settings, show_progress=False)
    out = render_report(tmp_path / "run", seconds=0)
    text = out.read_text(encoding="utf-8")
    for label in SMALL.variants:
        assert f'<th class="text">{label}</th>' in text
    for mode in SMALL.modes:
        assert f"<h3>{mode}: peak memory</h3>" in text
    assert "attnprof report: small" in text and "torch_version" in text
    charts = sorted(p.name for p in out.parent.glob("report-*.png"))
    assert charts == ["report-capacity.png", "report-memory.png", "report-savings.png", "report-time-accuracy.png",
                      "report-time.png"]
