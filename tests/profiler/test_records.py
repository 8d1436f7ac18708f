"""The data model (profiler/records.py): a shape validates itself, a point normalises its
mode, a point's key and a record's key are the same tuple, and a record round-trips
through its row."""

import json
import math
from dataclasses import fields

import pandas as pd
import pytest

from attnprof.errors import UserError
from attnprof.profiler.records import (DTYPE_BYTES, DTYPES, IDENTITY_FIELDS, MAX_LAYERS, MODES, NO_MODE, Point,
                                       PointRecord, Shape, ShapeError, canonical_dtype, key_of_record, step_time_ms,
                                       variant_family)


def test_dtype_aliases_are_canonical_names_and_unknown_ones_are_refused():
    assert canonical_dtype("bf16") == "bfloat16" and canonical_dtype("half") == "float16"
    assert canonical_dtype("float32") == "float32"
    assert Shape(dtype="fp16").dtype == "float16"
    assert set(DTYPE_BYTES) == set(DTYPES)
    with pytest.raises(ShapeError, match="unknown dtype 'int8'"):
        canonical_dtype("int8")


@pytest.mark.parametrize("field_name, value", [("seq_len", 0), ("batch", -1), ("heads", 2.0), ("layers", True),
                                               ("d_model", "256")])
def test_every_size_is_a_positive_integer(field_name, value):
    with pytest.raises(ShapeError, match=f"{field_name} must be a positive integer"):
        Shape(**{field_name: value})


def test_a_stack_deeper_than_max_layers_is_refused_in_words():
    """A prediction composes the stack layer by layer: 10**8 layers (from a flag, a scenario, a
    model config or a run folder's record) ran a process out of memory instead of being refused."""
    assert Shape(layers=MAX_LAYERS).layers == MAX_LAYERS
    with pytest.raises(ShapeError, match=f"layers must be at most {MAX_LAYERS:,}, got 100,000,000"):
        Shape(layers=10**8)


def test_a_shape_knows_its_head_dim_tokens_and_lengths():
    shape = Shape(seq_len=512, batch=3, d_model=64, heads=4)
    assert shape.head_dim == 16 and shape.tokens == 1536
    assert shape.with_len(1024) == Shape(seq_len=1024, batch=3, d_model=64, heads=4)
    assert shape.to_dict()["head_dim"] == 16 and shape.to_dict()["seq_len"] == 512
    with pytest.raises(ShapeError, match="not divisible by heads 4"):
        Shape(d_model=30, heads=4)
    assert isinstance(ShapeError("x"), UserError)  # one line and exit 2 on the command line


def test_a_point_at_scope_attention_has_no_mode_and_a_model_point_needs_a_known_one():
    shape = Shape(seq_len=64, d_model=32, heads=2)
    assert Point("sdpa", "checkpoint", "attention", shape).mode == NO_MODE
    for mode in MODES:
        assert Point("sdpa", mode, "model", shape).mode == mode
    with pytest.raises(UserError, match="unknown mode 'fast'"):
        Point("sdpa", "fast", "model", shape)
    with pytest.raises(UserError, match="unknown scope 'layer'"):
        Point("sdpa", "plain", "layer", shape)


def test_identity_fields_are_the_points_fields_with_the_shape_in_place():
    shape_names = [f.name for f in fields(Shape)]
    assert IDENTITY_FIELDS == ("variant", "mode", "scope", *shape_names, "forward_only")


def test_a_points_key_is_its_records_key_and_its_text_is_json():
    point = Point("lsh[n_hashes=8]", "reversible", "model", Shape(seq_len=256, d_model=64, heads=4, dtype="bf16"),
                  forward_only=True)
    record = PointRecord.for_point(point, status="oom", reason="out of memory").to_row()
    assert key_of_record(record) == point.key()
    assert json.loads(point.key_text()) == list(point.key())
    assert record["head_dim"] == 16 and record["dtype"] == "bfloat16" and record["forward_only"] is True
    other = Point("lsh[n_hashes=8]", "reversible", "model", Shape(seq_len=512, d_model=64, heads=4, dtype="bf16"),
                  forward_only=True)
    assert other.key() != point.key()


def test_a_record_comes_back_from_its_row_and_ignores_unknown_fields():
    point = Point("sdpa", "plain", "model", Shape(seq_len=128, d_model=32, heads=2))
    record = PointRecord.for_point(point, measured_peak_bytes=1 << 20, time_fwd_ms=2.0, time_bwd_ms=3.0)
    row = record.to_row()
    assert PointRecord.from_dict({**row, "from_a_newer_version": 1}) == record
    assert record.time_ms == 5.0
    assert PointRecord.for_point(point, time_fwd_ms=2.0).time_ms == 2.0  # forward-only: no backward


def test_variant_family_is_pure_string_work():
    assert variant_family("lsh[n_hashes=8]") == "lsh" and variant_family("sdpa") == "sdpa"
    assert variant_family("pkg.mod:Cls[x=1]") == "pkg.mod:Cls" and variant_family("[x]") == "[x]"


def test_step_time_is_forward_plus_backward_on_numbers_and_series():
    assert step_time_ms(2.0, 3.0) == 5.0 and step_time_ms(2.0, None) == 2.0 and step_time_ms(None, 3.0) is None
    total = step_time_ms(pd.Series([2.0, 2.0, math.nan]), pd.Series([3.0, math.nan, 3.0]))
    assert total.tolist()[:2] == [5.0, 2.0] and math.isnan(total.iloc[2])


def test_a_record_from_before_the_later_fields_keys_like_their_defaults():
    """Records and baselines written before a later Shape field (issue 24) keep their keys."""
    from attnprof.profiler.records import IDENTITY_DEFAULTS, Point, Shape, key_of_record, later_label

    point = Point("full", "plain", "model", Shape(seq_len=64, d_model=32, heads=2))
    old = {k: v for k, v in point.identity().items() if k not in IDENTITY_DEFAULTS}
    assert key_of_record(old) == point.key()
    assert later_label(old) == "" and later_label(point.identity()) == ""
    for name, default in IDENTITY_DEFAULTS.items():  # each default is a valid value of its field
        Shape(**{name: default})
