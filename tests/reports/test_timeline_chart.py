"""The report's memory-over-a-step chart: the longest ok point of each built-in variant,
its predicted live bytes stacked by category, peaking at the prediction."""

import pytest
from conftest import CI_VARIANTS, synthetic_record, write_run

from attnprof.profiler.predict.fake_run import predict
from attnprof.reports.data import load
from attnprof.reports.render import render_report
from attnprof.reports.timeline_chart import curves, draw, longest_points, timeline_chart


def _frame(tmp_path, records):
    return load(write_run(tmp_path / "run", records)).frame


def test_the_longest_ok_point_of_each_builtin_variant_plain_first(tmp_path):
    frame = _frame(tmp_path, [synthetic_record("full", "plain", 128), synthetic_record("full", "checkpoint", 256),
                              synthetic_record("full", "plain", 256),
                              synthetic_record("full", "plain", 512, status="oom", reason="out of memory"),
                              synthetic_record("sdpa", "reversible", 128), synthetic_record("my.plugin:Attn", "plain", 128)])
    chosen = [(v, p.mode, p.shape.seq_len) for v, p in longest_points(frame)]
    assert chosen == [("full", "plain", 256), ("sdpa", "reversible", 128)]


def test_the_chart_peaks_at_the_prediction_and_names_what_it_left_out(tmp_path):
    frame = _frame(tmp_path, [synthetic_record("full", "plain", 64), synthetic_record("sdpa", "plain", 64)])
    from attnprof.profiler.timeline.build import point_timeline

    (variant, point), _ = longest_points(frame)
    t = point_timeline(point)
    data = curves(t)
    assert max(sum(col) for col in zip(*data["y"].values())) == predict(point).peak_bytes
    assert {"parameters", "activations"} <= set(data["y"])
    assert draw([(variant, t)]) is not None and draw([]) is None
    fig, note = timeline_chart(frame, 0)
    assert fig is None and "no time" in note


@pytest.mark.slow
def test_the_report_has_the_section_when_it_has_time(tmp_path):
    run = write_run(tmp_path / "run", [synthetic_record("full", "plain", 64), synthetic_record("sdpa", "plain", 64)])
    html = render_report(run, seconds=60).read_text(encoding="utf-8")
    assert 'id="timeline"' in html and "Memory over a step" in html
    assert (run / "report-timeline.png").exists()
    assert "<script" not in html
    assert 'id="timeline"' not in render_report(run, seconds=0).read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_default_render_of_a_ci_run_draws_the_chart_for_every_variant(ci_run):
    """Its own budget: not only what the capacity phase leaves of the default render time."""
    html = render_report(ci_run).read_text(encoding="utf-8")
    section = html[html.index('id="timeline"'):html.index('id="scaling"')]
    assert "<img" in section and (ci_run / "report-timeline.png").stat().st_size > 0
    assert "Not drawn" not in section
    for variant in CI_VARIANTS:
        assert f"(longest ok point of {variant})" in section, variant
    assert "full checkpoint n=1024 (longest ok point of full)" in section  # full plain n=1024 ran out of memory
