"""The peak split's grouping and the peak op's text (issue 24), and the CLI table's columns
for them (points.format_table)."""

from __future__ import annotations

from attnprof.profiler.predict.peak_split import OTHER, PARTS, peak_op_text, split
from attnprof.profiler.predict.points import format_table


def test_split_groups_every_category_into_its_part():
    got = split({"parameters": 1, "gradients": 2, "optimizer_state": 4, "autocast_copies": 8, "inputs": 16,
                 "activations": 32, "lm_head_loss": 64, "temporaries": 128, "optimizer_temporaries": 256})
    assert got == {"model states": 15, "inputs": 16, "activations": 32, "lm head/loss": 64, "temporaries": 384}
    assert list(got) == [part for part, _ in PARTS]


def test_an_unknown_category_goes_to_other_and_nothing_is_lost():
    got = split({"activations": 5, "from_a_later_tracker": 7})
    assert got[OTHER] == 7 and sum(got.values()) == 12
    assert OTHER not in split({}) and sum(split(None).values()) == 0


def test_peak_op_text():
    assert peak_op_text("_log_softmax_backward_data.default", "backward") == "_log_softmax_backward_data (bwd)"
    assert peak_op_text("_foreach_sqrt.default", "step") == "_foreach_sqrt (step)"
    assert peak_op_text("sum.dim_IntList", "forward") == "sum.dim_IntList (fwd)"
    assert peak_op_text("", "") == "-" and peak_op_text(float("nan"), None) == "-"


ROW = {"variant": "sdpa", "mode": "plain", "seq_len": 128, "batch": 1, "status": "ok", "reason": "",
       "predicted_peak_bytes": 100, "flops": 10, "predicted_peak_op": "mm.default", "predicted_peak_pass": "forward",
       "predicted_breakdown_bytes": {"parameters": 10, "gradients": 0, "inputs": 0, "activations": 50,
                                     "temporaries": 40}}


def test_the_cli_table_has_the_peak_op_and_an_lm_column_where_there_is_one():
    plain = format_table([ROW]).splitlines()
    assert plain[1].split()[-1] == "op" and plain[2].endswith("mm (fwd)") and "lm head/loss" not in plain[1]
    lm = {**ROW, "predicted_breakdown_bytes": {**ROW["predicted_breakdown_bytes"], "lm_head_loss": 3 << 20}}
    skipped = {**ROW, "status": "skipped", "reason": "too long"}
    lines = format_table([lm, skipped]).splitlines()
    assert "lm head/loss" in lines[1] and "3.00 MiB" in lines[2]
    assert lines[3].split()[-2:] == ["too", "long"]
