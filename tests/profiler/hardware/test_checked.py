"""hardware/checked.py: where the GPU models were held to a real GPU, and what that says of a point."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnprof.errors import UserError
from attnprof.profiler.hardware.checked import (BUILTIN_FILE, CheckedTableError, builtin_checks, how_sure,
                                                kind_of, load_checks, summary_lines)
from attnprof.profiler.hardware.gpus import ENV_VAR, get_gpu
from attnprof.profiler.records import Point, Shape

MEASURED = dict(batch=1, d_model=1024, heads=16, layers=2)


@pytest.fixture(autouse=True)
def no_user_table(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def point(variant="sdpa", mode="plain", scope="model", n=8192, dtype="bfloat16", forward_only=False, **shape):
    return Point(variant, mode, scope, Shape(seq_len=n, dtype=dtype, **{**MEASURED, **shape}),
                 forward_only=forward_only).identity()


def h200_check():
    return next(c for c in builtin_checks() if c.gpu == "h200")


def test_the_package_file_holds_the_h200_check_with_its_source_and_ranges():
    check = h200_check()
    assert check.device_name == "NVIDIA H200" and check.torch.startswith("2.11")
    assert check.measurements_path().is_file() and "gpu-runs/h200-2026-12-04" in check.source
    assert check.points >= check.timed_points > 0 and set(check.time_kinds) <= set(check.memory_kinds)
    for lo, hi in check.ratios.values():
        assert 0 < lo <= hi
    assert load_checks(BUILTIN_FILE) == builtin_checks()


@pytest.mark.parametrize("kind", [k for c in builtin_checks() if c.gpu == "h200" for k in c.memory_kinds])
def test_every_measured_kind_at_a_measured_size_is_checked_with_the_files_ranges(kind):
    variant, scope, mode, dtype = kind.split()
    check = h200_check()
    text = how_sure(point(variant, mode, scope, check.sizes["seq_len"][0], dtype), get_gpu("h200"))
    assert text.startswith(f"checked on a real {check.device_name} (torch {check.torch}")
    lo, hi = check.ratios["allocated"]
    assert f"allocated {lo:.2f}-{hi:.2f}" in text and "not among those measured" not in text
    lo, hi = check.ratios["time"]
    assert (f"fwd+bwd time {lo:.2f}-{hi:.2f}" in text) == (kind in check.time_kinds)
    assert ("time not measured for this kind" in text) == (kind not in check.time_kinds)


def test_sizes_outside_those_measured_are_named_and_the_claim_still_given():
    text = how_sure(point(n=65536, d_model=2048, heads=16), get_gpu("h200"))
    assert text.startswith("checked on a real") and "this point's seq_len, d_model, d_ff not among those measured" in text
    # layers and the MLP do not exist at scope attention: only its own sizes count
    assert "not among" not in how_sure(point("sdpa", "plain", "attention", 4096, layers=7, ff_mult=2),
                                       get_gpu("h200"))


@pytest.mark.parametrize("identity, reason", [
    (point(mode="reversible"), "reversible mode"),
    (point(forward_only=True), "forward only (measured: forward and backward)"),
    (point(dtype="float32", autocast="bfloat16"), "AMP (autocast bfloat16)"),
    (point(optimizer="adamw"), "an optimizer step (adamw)"),
    (point(vocab=32000), "an LM head (vocab 32000)"),
    (point(kv_heads=4), "grouped KV heads (4 of 16)"),
    (point(rope=True), "RoPE"),
    (point(mlp="swiglu"), "the swiglu MLP"),
    (point(norm="rmsnorm"), "rmsnorm norms"),
    (point(ff_chunks=4), "feed-forward in 4 chunks"),
    (point("talking_heads"), "variant talking_heads"),
    (point("lsh[n_hashes=8]"), "variant lsh[n_hashes=8] (measured with its default options only)"),
    (point("full", dtype="float32"), "full model plain float32 was not measured"),
    (point(dtype="float16"), "dtype float16"),
])
def test_a_point_unlike_any_measured_says_the_first_reason(identity, reason):
    assert how_sure(identity, get_gpu("h200")) == f"not checked on a real GPU: {reason}"


def test_as_many_kv_heads_as_heads_is_plain_multi_head_attention():
    assert how_sure(point(kv_heads=16), get_gpu("h200")).startswith("checked on a real")


def test_another_gpu_or_a_users_entry_under_the_measured_key_is_not_checked():
    assert how_sure(point(), get_gpu("l4")) == "not checked on a real GPU: l4 was never measured (measured: h200)"
    mine = replace(get_gpu("h200"), overrides_builtin=True, origin="mine.toml")
    assert how_sure(point(), mine) == ("not checked on a real GPU: this h200 comes from mine.toml, "
                                       "not the table entry measured")


def test_an_old_record_without_later_fields_and_hostile_text_are_read_as_data():
    record = {k: v for k, v in point().items() if k in ("variant", "mode", "scope", "seq_len", "batch", "d_model",
                                                        "heads", "layers", "dtype", "ff_mult", "ff_chunks")}
    assert how_sure(record, get_gpu("h200")).startswith("checked on a real")
    text = how_sure({**record, "variant": "x\x1b[2Jy\n"}, get_gpu("h200"))
    assert text == "not checked on a real GPU: variant x\\x1b[2Jy\\n" and text.isprintable()
    assert kind_of(record) == "sdpa model plain bfloat16"


GOOD = BUILTIN_FILE.read_text()


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('gpu = "h200"\n', ""), "field 'gpu' is missing"),
    (lambda s: s.replace('date = ', 'colour = "red"\ndate = '), "field 'colour' is not a known field"),
    (lambda s: s.replace("allocated = [", "allocated = [2.0, "), "field 'ratios.allocated' must be [lowest, highest]"),
    (lambda s: s.replace("batch = [1, 1]", "batch = [1.5, 2]"), "field 'sizes.batch' must be [lowest, highest]"),
    (lambda s: s.replace('time_kinds = ["sdpa', 'time_kinds = ["rope model plain bfloat16", "sdpa'),
     "field 'time_kinds' names a kind that memory_kinds lacks"),
    (lambda s: s.replace("points = 23", "points = -1"), "field 'points' must be a whole number"),
    (lambda s: s + "\n[other]\n", "expected [[checks]] tables and nothing else"),
    (lambda s: s + "\n[[checks\n", "not valid TOML"),
])
def test_a_bad_checks_file_is_a_one_line_error_naming_the_field(tmp_path, edit, message):
    f = tmp_path / "checked.toml"
    f.write_text(edit(GOOD))
    with pytest.raises(CheckedTableError, match="check 1: " + message.replace("[", r"\[") if "field" in message
                       else message.replace("[", r"\[")) as e:
        load_checks(f)
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_a_missing_checks_file_is_a_one_line_error(tmp_path):
    with pytest.raises(CheckedTableError, match="cannot read the GPU checks"):
        load_checks(tmp_path / "none.toml")


def test_the_summary_names_only_what_differs_between_the_rows_it_groups():
    rows = [{"gpu": "h200", "variant": "sdpa", "mode": m, "seq_len": 4096, "gpu_checked": t}
            for m, t in (("plain", "yes"), ("checkpoint", "yes"), ("reversible", "no\x1b"))]
    assert summary_lines(rows) == ["how sure, plain, checkpoint: yes", "how sure, reversible: no\\x1b"]
    assert summary_lines(rows[:2]) == ["how sure (the GPU model against a real GPU): yes"]
    assert summary_lines([{**rows[0], "gpu_checked": ""}]) == []
    many = [{**rows[2], "seq_len": n} for n in range(6)] + [rows[0]]
    assert summary_lines(many)[0] == "how sure, reversible n=0, reversible n=1, reversible n=2, reversible n=3 and 2 more: no\\x1b"
