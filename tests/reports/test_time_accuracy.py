"""The time model against measurement: the error statistics (reports/time_accuracy.py) on
hand-made records, the chart, and the report section that is there only when some point
has a prediction."""

import math

import numpy as np
import pandas as pd
import pytest

from attnprof.reports import charts, time_accuracy as ta
from attnprof.reports.data import tidy
from attnprof.reports.render import NO_TIME_MODEL, render_report

from conftest import Page, ci_records, synthetic_record, write_run


def row(variant="sdpa", mode="plain", n=1024, fwd=40.0, bwd=80.0, pred_fwd=None, pred_bwd=None, **more):
    """A result row measured at fwd/bwd ms, predicted at pred_fwd/pred_bwd (None: no prediction)."""
    r = synthetic_record(variant, mode, n).to_row()
    r.update(time_fwd_ms=fwd, time_bwd_ms=bwd, predicted_time_fwd_ms=pred_fwd, predicted_time_bwd_ms=pred_bwd, **more)
    return r


def predicted(ratio: float, measured_ms: float = 120.0, **kw) -> dict:
    """A row whose prediction is ``ratio`` times its measured fwd+bwd (split 1:2 like the measurement)."""
    return row(fwd=measured_ms / 3, bwd=2 * measured_ms / 3, pred_fwd=ratio * measured_ms / 3,
               pred_bwd=ratio * 2 * measured_ms / 3, **kw)


# --- the statistics -------------------------------------------------------------------------
def test_only_ok_points_with_a_complete_prediction_pair():
    records = [
        row(pred_fwd=30.0, pred_bwd=90.0),  # kept: 120 measured, 120 predicted
        row(),  # prediction None
        {k: v for k, v in row().items() if not k.startswith("predicted_time")},  # an old record: no fields
        row(pred_fwd=30.0, pred_bwd=None),  # backward measured, not predicted: no prediction
        row(status="oom", pred_fwd=30.0, pred_bwd=90.0),  # not ok
        row(pred_fwd=float("nan"), pred_bwd=90.0), row(pred_fwd="30", pred_bwd=90.0),
        row(pred_fwd=True, pred_bwd=90.0), row(pred_fwd=-1.0, pred_bwd=90.0), row(pred_fwd=0, pred_bwd=90.0),
        row(fwd=None, bwd=None, pred_fwd=30.0, pred_bwd=90.0),  # nothing measured
        row(variant="full", fwd=50.0, bwd=None, pred_fwd=25.0, pred_bwd=70.0),  # forward only: fwd vs fwd
    ]
    found = ta.pairs(records)
    assert [(p.label, p.measured_ms, p.predicted_ms) for p in found] == [("sdpa", 120.0, 120.0), ("full", 50.0, 25.0)]
    assert found[1].log_ratio == pytest.approx(math.log(0.5))


def test_the_gpu_source_reads_the_gpu_fields():
    r = row(gpu_time_fwd_ms=10.0, gpu_time_bwd_ms=20.0)
    assert ta.pairs([r]) == []
    assert [p.predicted_ms for p in ta.pairs([r], source="gpu")] == [30.0]


def test_quantile_interpolates_as_numpy_does():
    values = [3.0, 0.5, 8.0, 1.0, 2.0, 13.0]
    for q in (0.0, 0.25, 0.5, 0.9, 1.0):
        assert ta.quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    with pytest.raises(ValueError):
        ta.quantile([], 0.5)


def test_points_under_50_ms_are_not_scored():
    records = [predicted(2.0), predicted(0.5), predicted(1.25), predicted(1.0),
               predicted(100.0, measured_ms=49.9)]  # way off, but too short to score
    acc = ta.accuracy(ta.pairs(records))
    assert (acc.count, acc.short) == (4, 1)
    # |ln r| sorted: 0, ln 1.25, ln 2, ln 2 -> median between ln 1.25 and ln 2; p90 at ln 2
    assert acc.median_factor == pytest.approx(math.sqrt(1.25 * 2.0))
    assert acc.p90_factor == pytest.approx(2.0)
    assert not acc.meets_goals  # 1.58x > 1.5x
    line = ta.summary_line(acc)
    assert "median 1.58×" in line and "p90 2.00×" in line and "goals MISSED" in line and "1 shorter" in line


def test_goals_met_and_nothing_scored():
    acc = ta.accuracy(ta.pairs([predicted(1.2), predicted(1 / 1.3), predicted(1.1, measured_ms=50.0)]))
    assert acc.count == 3 and acc.meets_goals and "goals met" in ta.summary_line(acc)
    none = ta.accuracy(ta.pairs([predicted(1.0, measured_ms=10.0)]))
    assert (none.count, none.short, none.median_factor, none.meets_goals) == (0, 1, None, False)
    assert "No scored point" in ta.summary_line(none)


def test_per_variant_signed_error_furthest_off_first():
    records = [predicted(2.0, variant="lsh"), predicted(4.0, variant="lsh"), predicted(3.0, variant="lsh"),
               predicted(0.5, variant="full"), predicted(1.1, variant="sdpa"),
               predicted(0.9, variant="sdpa", mode="checkpoint"),
               predicted(50.0, variant="sdpa", measured_ms=5.0)]  # not scored
    groups = ta.by_group(ta.pairs(records))
    assert [g.key for g in groups] == [("lsh",), ("full",), ("sdpa",)]
    assert [g.count for g in groups] == [3, 1, 2]
    assert groups[0].median_ratio == pytest.approx(3.0) and groups[0].worst_ratio == pytest.approx(4.0)
    assert groups[1].median_ratio == pytest.approx(0.5)
    assert ta.fmt_ratio(groups[0].median_ratio) == "3.00× too slow"
    assert ta.fmt_ratio(groups[1].median_ratio) == "2.00× too fast"
    by_mode = ta.by_group(ta.pairs(records), key=lambda p: (p.label, p.mode))
    # 0.9x is further off than 1.1x
    assert [(g.key, g.count) for g in by_mode][-2:] == [(("sdpa", "checkpoint"), 1), (("sdpa", "plain"), 1)]


# --- the chart and the section ---------------------------------------------------------------
def test_the_chart_needs_a_prediction():
    assert charts.time_accuracy_chart(tidy(pd.DataFrame([row(), row(n=2048)]))) is None
    fig = charts.time_accuracy_chart(tidy(pd.DataFrame([predicted(1.3), predicted(0.7, n=2048),
                                                          predicted(3.0, measured_ms=5.0, n=4096)])))
    assert fig is not None
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 4  # x1.5 and x2.5, either way


def with_predictions(records):
    """Rows of ``records`` with a prediction 1.3x their measured times (ok points only)."""
    out = []
    for r in records:
        r = r.to_row()
        if r["status"] == "ok":
            r.update(predicted_time_fwd_ms=1.3 * r["time_fwd_ms"], predicted_time_bwd_ms=1.3 * r["time_bwd_ms"])
        out.append(r)
    return out


def test_the_section_is_there_when_some_point_has_a_prediction(tmp_path):
    out = render_report(write_run(tmp_path / "run", with_predictions(ci_records())), seconds=0)
    text = out.read_text(encoding="utf-8")
    assert (out.parent / "report-time-accuracy.png").is_file()
    assert 'id="time-model"' in text and NO_TIME_MODEL not in text
    assert "goal ≤ 1.5×" in text and 'class="time-errors"' in text
    assert Page(text).tags.count("img") == 5  # memory, time, savings, capacity + this one


def test_an_old_run_has_no_section_but_one_sentence(tmp_path):
    out = render_report(write_run(tmp_path / "run", ci_records()), seconds=0)
    text = out.read_text(encoding="utf-8")
    assert 'id="time-model"' not in text and text.count(NO_TIME_MODEL.split(",")[0]) == 1
    assert not (out.parent / "report-time-accuracy.png").exists()


def test_hostile_variant_labels_are_text_in_the_section(tmp_path):
    hostile = ['</td><script>alert(1)</script>', 'x" onerror="alert(2)', "cost $\\frac{1}{2}$ & <b>"]
    records = [synthetic_record(label, "plain", n, scale=300.0) for label in hostile for n in (256, 512)]
    out = render_report(write_run(tmp_path / "run", with_predictions(records)), seconds=0)
    page = Page(out.read_text(encoding="utf-8"))
    assert "script" not in page.tags and "b" not in page.tags
    assert all(not k.startswith("on") for k, _ in page.attrs)
    shown = "".join(page.text)
    assert "Signed error per variant" in shown
    for label in hostile:
        assert label in shown, label
