"""The report's charts (reports.charts): wrapped legend labels, the savings against plain,
None when there is nothing to draw, and PNG files written by ``save``."""

import pandas as pd
import pytest

from attnprof.reports.charts import legend_label, memory_chart, save, savings_table, time_chart
from attnprof.reports.data import load

from conftest import MODE_FACTOR, ci_records, write_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_long_labels_wrap_at_commas_and_a_leading_underscore_is_kept():
    assert legend_label("lsh[n_hashes=8,bucket_size=64]") == "lsh[n_hashes=8,\nbucket_size=64]"
    assert legend_label("full") == "full"
    assert legend_label("_private").startswith(" _")  # matplotlib drops labels starting with "_"


def test_savings_are_against_plain_at_the_same_series_and_length(tmp_path):
    frame = load(write_run(tmp_path / "run", ci_records(variants=("full", "sdpa")))).frame
    saved = savings_table(frame)
    assert set(saved["mode"]) == {"checkpoint", "reversible"}
    assert len(saved) == 2 * 2 * 3  # two saving modes x two series x three lengths
    for mode in ("checkpoint", "reversible"):
        assert saved[saved["mode"] == mode]["saved_pct"].tolist() == pytest.approx(
            [100 * (1 - MODE_FACTOR[mode])] * 6, rel=1e-6)
    # full plain at 1024 ran out of memory: its saving is on the predicted peaks
    unmeasured = saved[~saved["measured"]]
    assert set(zip(unmeasured["series"], unmeasured["seq_len"])) == {("full", 1024)}


def test_charts_are_none_without_anything_to_draw_and_save_writes_the_png(tmp_path):
    frame = load(write_run(tmp_path / "run", ci_records(variants=("sdpa",)))).frame
    fig = memory_chart(frame)
    assert fig is not None and time_chart(frame) is not None
    data = save(fig, tmp_path / "memory.png")
    assert data.startswith(PNG_SIGNATURE) and (tmp_path / "memory.png").read_bytes() == data
    nothing = frame.assign(peak_bytes=pd.NA, time_ms=pd.NA, status="oom")
    assert memory_chart(nothing) is None and time_chart(nothing) is None
