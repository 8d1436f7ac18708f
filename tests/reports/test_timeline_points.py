"""Which points the memory-over-a-step chart draws: the named ones by the labels the report
shows, and the longest ok point of each variant while its predicted trace cost fits."""

import dataclasses

import pytest
from conftest import synthetic_record, write_run
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.reports.data import load
from attnprof.reports.render import render_report
from attnprof.reports.timeline_points import (SECONDS_PER_LAYER, TIMELINE_SECONDS, Costs, TimelinePointError, cost_units,
                                              longest, named)

runner = CliRunner()


def _run(tmp_path, records):
    return write_run(tmp_path / "run", records)


def _small(tmp_path):
    return _run(tmp_path, [synthetic_record(v, m, n) for v in ("full", "sdpa") for m in ("plain", "checkpoint")
                           for n in (64, 128)])


def test_a_point_is_found_by_the_gate_label_and_by_the_series_form(tmp_path):
    frame = load(_run(tmp_path, [synthetic_record("sdpa", "plain", 64),
                                 dataclasses.replace(synthetic_record("sdpa", "plain", 64), d_model=32, head_dim=8)])).frame
    # two points the gate's label cannot tell apart (they differ in d_model): ambiguous, the series form is offered
    with pytest.raises(TimelinePointError, match="names 2 points.*d_model=32"):
        named(frame, ["sdpa plain n=64"])
    (c,) = named(frame, ["sdpa  (d_model=32)   plain n=64", "sdpa (d_model=32) plain n=64"])  # repeat drawn once
    assert (c.point.variant, c.point.shape.d_model, c.why) == ("sdpa", 32, "named")


def test_an_unknown_label_is_one_line_listing_valid_ones_and_escaped(tmp_path):
    frame = load(_small(tmp_path)).frame
    with pytest.raises(TimelinePointError) as err:
        named(frame, ["full plain\x1b[31m\nn=1"])
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message and "\\x1b" in message
    assert "'full plain n=64'" in message and "more" in message


def test_an_unknown_label_on_the_cli_is_one_line_exit_2(tmp_path):
    run = _small(tmp_path)
    result = runner.invoke(app, ["report", str(run), "--seconds", "0", "--timeline-point", "sdpa plain n=999"])
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1 and "sdpa plain n=999" in result.stderr and "sdpa plain n=64" in result.stderr
    assert not (run / "report.html").exists()  # refused before any work


def test_the_named_point_is_drawn_and_named_on_the_page(tmp_path):
    run = _small(tmp_path)
    result = runner.invoke(app, ["report", str(run), "--seconds", "0", "--timeline-point", "sdpa checkpoint n=64"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    html = (run / "report.html").read_text(encoding="utf-8")
    section = html[html.index('id="timeline"'):]
    assert "sdpa checkpoint n=64 (named)" in section and "<img" in section
    assert (run / "report-timeline.png").stat().st_size > 0
    assert "<script" not in html
    # without the name, predictions off: no chart
    render_report(run, seconds=0)
    assert not (run / "report-timeline.png").exists()


def test_a_point_too_costly_is_skipped_with_its_reason_on_the_page(tmp_path):
    layers = int(2 * TIMELINE_SECONDS / SECONDS_PER_LAYER)  # a prior estimate twice the budget
    deep = dataclasses.replace(synthetic_record("full", "plain", 64), layers=layers)
    run = _run(tmp_path, [deep, synthetic_record("sdpa", "plain", 64)])
    html = render_report(run, seconds=1).read_text(encoding="utf-8")
    section = html[html.index('id="timeline"'):]
    assert "Not drawn: full plain n=64: its trace would take about" in section
    assert "--timeline-point" in section and "sdpa plain n=64 (longest ok point of sdpa)" in section


def test_the_cost_grows_with_layers_and_long_sequences_and_learns_from_what_it_saw(tmp_path):
    frame = load(_run(tmp_path, [synthetic_record("full", "plain", 64), synthetic_record("sdpa", "plain", 1 << 18)])).frame
    short, long_ = (c.point for c in longest(frame))
    assert cost_units(short) == 2 and cost_units(long_) == 2 * 4
    costs = Costs()
    assert costs.estimate_s(short) == pytest.approx(2 * SECONDS_PER_LAYER)
    costs.saw(short, 1.0)
    assert costs.estimate_s(long_) == pytest.approx(4.0)
