"""The report's "What holds the peak" (issue 24): per series, at its longest ok point, the
predicted peak split into model states, inputs, activations, the LM head/loss and
temporaries, and the op holding the peak with its pass; escaped, self-contained, absent
for records without a breakdown."""

from __future__ import annotations

from dataclasses import replace

from attnprof.profiler.units import fmt_bytes
from attnprof.reports.data import load
from attnprof.reports.peak_table import peak_split_table, split_rows
from attnprof.reports.render import render_report

from conftest import Page, synthetic_record, write_run

EVIL = "<script>alert(1)</script>"
LM_BREAKDOWN = {"parameters": 1000, "gradients": 200, "inputs": 16, "activations": 3000, "temporaries": 40,
                "optimizer_state": 2000, "optimizer_temporaries": 60, "autocast_copies": 500,
                "lm_head_loss": 7_000_000}


def split_record(variant: str, mode: str, n: int, breakdown: dict, op: str = "_log_softmax_backward_data.default",
                 pass_: str = "backward", **identity):
    record = replace(synthetic_record(variant, mode, n), **identity)
    record.predicted_breakdown_bytes = {k: v * n // 256 for k, v in breakdown.items()}
    record.predicted_peak_bytes = sum(record.predicted_breakdown_bytes.values())
    record.predicted_peak_op, record.predicted_peak_pass = op, pass_
    return record


def lm_run(tmp_path):
    records = [split_record("sdpa", "plain", n, LM_BREAKDOWN, vocab=32000) for n in (256, 512, 1024)]
    records += [split_record("sdpa", "plain", n, {"parameters": 10, "gradients": 0, "inputs": 4, "activations": 99,
                                                 "temporaries": 7}, op="mm.default")
                for n in (256, 512)]
    return write_run(tmp_path / "run", records)


def test_a_vocab_series_is_split_at_its_longest_point(tmp_path):
    rows = split_rows(load(lm_run(tmp_path)).frame)
    lm = next(r for r in rows if "vocab=32000" in r["series"])
    assert lm["seq_len"] == 1024 and lm["peak_op"] == "_log_softmax_backward_data (bwd)"
    assert lm["parts"] == {"model states": 3700 * 4, "inputs": 16 * 4, "activations": 3000 * 4,
                           "lm head/loss": 7_000_000 * 4, "temporaries": 100 * 4}
    plain = next(r for r in rows if "vocab=0" in r["series"])
    assert plain["seq_len"] == 512 and plain["parts"]["lm head/loss"] == 0 and plain["peak_op"] == "mm (bwd)"


def test_the_page_shows_the_split_table(tmp_path):
    text = render_report(lm_run(tmp_path), seconds=0).read_text(encoding="utf-8")
    assert 'id="peak-split"' in text and "What holds the peak" in text
    table = text[text.index('<table class="peak-split">'):]
    table = table[:table.index("</table>")]
    for header in ("model states", "activations", "lm head/loss", "temporaries", "peak op"):
        assert f">{header}</th>" in table
    assert f">{fmt_bytes(7_000_000 * 4)}</td>" in table and "_log_softmax_backward_data (bwd)" in table


def test_labels_and_ops_are_escaped(tmp_path):
    records = [split_record(EVIL, "plain", 256, LM_BREAKDOWN, op='<img src=x onerror="alert(2)">')]
    html = peak_split_table(load(write_run(tmp_path / "run", records)).frame)
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html
    assert not any(tag in ("script", "img") for tag in Page(html).tags)


def test_records_without_a_breakdown_have_no_such_section(ci_run):
    assert peak_split_table(load(ci_run).frame) == ""
    assert 'id="peak-split"' not in render_report(ci_run, seconds=0).read_text(encoding="utf-8")


def test_an_older_record_without_a_peak_op_shows_a_dash(tmp_path):
    records = [split_record("sdpa", "checkpoint", 256, LM_BREAKDOWN, op="", pass_="")]
    assert split_rows(load(write_run(tmp_path / "run", records)).frame)[0]["peak_op"] == "-"
