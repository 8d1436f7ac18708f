"""Runs of other shapes than the ci fixture still render: the attention scope alone,
nothing measured, a single point, a run that varies its model shape."""

import pytest

from attnprof.reports.data import load
from attnprof.reports.render import render_report

from conftest import synthetic_record, write_run


def pngs(out):
    return sorted(p.name.split("-", 1)[1] for p in out.parent.glob(f"{out.stem}-*.png"))


def test_attention_scope_run_has_no_savings_chart(tmp_path):
    records = [synthetic_record(v, "none", n, scope="attention") for v in ("full", "lsh") for n in (256, 512, 1024)]
    out = render_report(write_run(tmp_path / "run", records), seconds=0)
    assert pngs(out) == ["capacity.png", "memory.png", "time.png"]
    assert "<h3>attention: peak memory</h3>" in out.read_text(encoding="utf-8")


def test_a_run_where_nothing_finished_still_renders(tmp_path):
    records = [synthetic_record("full", m, n, status="oom", reason="out of memory")
               for m in ("plain", "checkpoint") for n in (256, 512)]
    out = render_report(write_run(tmp_path / "run", records), seconds=0)
    assert pngs(out) == ["capacity.png", "memory.png", "savings.png"]  # savings on predicted peaks; no times
    assert out.read_text(encoding="utf-8").count("out of memory") == 4


def test_a_single_point_renders(tmp_path):
    out = render_report(write_run(tmp_path / "run", [synthetic_record("sdpa", "plain", 256)]), seconds=0)
    assert "sdpa" in out.read_text(encoding="utf-8")


def test_a_rerender_removes_charts_that_no_longer_apply(tmp_path):
    run = write_run(tmp_path / "run", [synthetic_record("sdpa", m, 256) for m in ("plain", "checkpoint")])
    out = render_report(run, seconds=0)
    assert "savings.png" in pngs(out)
    (run / "results.jsonl").unlink()
    write_run(run, [synthetic_record("sdpa", "plain", 256)])
    assert "savings.png" not in pngs(render_report(run, seconds=0))


@pytest.mark.parametrize("field, values", [("d_model", (64, 128)), ("batch", (1, 4))])
def test_series_keep_apart_what_the_run_varies(tmp_path, field, values):
    records = []
    for value in values:
        for n in (256, 512):
            r = synthetic_record("sdpa", "plain", n)
            setattr(r, field, value)
            r.head_dim = r.d_model // r.heads  # a record's head_dim is d_model / heads
            records.append(r)
    frame = load(write_run(tmp_path / "run", records)).frame
    assert sorted(frame["series"].unique()) == sorted(f"sdpa ({field}={v})" for v in values)
