"""The report's capacity figures predict a series at the shape its records name, later
identity fields included (issue 24: kv_heads, rope): a record without them means the default."""

import pandas as pd

from attnprof.profiler.records import IDENTITY_DEFAULTS
from attnprof.reports.capacity import later_fields, point_maker

ROW = {"variant": "sdpa", "mode": "plain", "scope": "model", "seq_len": 256, "batch": 1, "d_model": 32, "heads": 4,
       "layers": 1, "dtype": "float32", "ff_mult": 4, "ff_chunks": 1, "forward_only": False}


def test_a_series_keeps_its_kv_heads_and_rope():
    rows = pd.DataFrame([{**ROW, "kv_heads": 2, "rope": True}])
    shape = point_maker(rows)(512).shape
    assert (shape.kv_heads, shape.rope, shape.seq_len) == (2, True, 512)


def test_records_without_later_fields_mean_their_defaults():
    assert later_fields(pd.DataFrame([ROW]).iloc[0]) == IDENTITY_DEFAULTS
    mixed = pd.DataFrame([ROW, {**ROW, "kv_heads": 2}])  # NaN where the older record lacks it
    assert later_fields(mixed.iloc[0])["kv_heads"] == 0 and later_fields(mixed.iloc[1])["kv_heads"] == 2
