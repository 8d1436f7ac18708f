"""The report's capacity curves predict a series' points with every identity field of its
records, the later ones too (issue 24: a language-model series is predicted with its
vocabulary, not as the bare stack); an older run without those columns gets the defaults."""

from __future__ import annotations

import pandas as pd

from attnprof.profiler.records import IDENTITY_DEFAULTS
from attnprof.reports.capacity import later_fields, point_maker

ROW = {"variant": "sdpa", "mode": "plain", "scope": "model", "seq_len": 256, "batch": 1, "d_model": 32, "heads": 4,
       "layers": 2, "dtype": "float32", "ff_mult": 4, "ff_chunks": 1, "forward_only": False}


def test_a_series_point_keeps_the_later_fields():
    rows = pd.DataFrame([{**ROW, "vocab": 1000, "tie_embeddings": True, "loss_chunks": 4}])
    shape = point_maker(rows)(1024).shape
    assert (shape.seq_len, shape.vocab, shape.tie_embeddings, shape.loss_chunks) == (1024, 1000, True, 4)
    assert type(shape.vocab) is int and type(shape.tie_embeddings) is bool


def test_an_older_run_gets_the_defaults():
    shape = point_maker(pd.DataFrame([ROW]))(512).shape
    assert {name: getattr(shape, name) for name in IDENTITY_DEFAULTS} == IDENTITY_DEFAULTS
    mixed = pd.DataFrame([{**ROW, "vocab": 7}, ROW])  # a column with a gap reads as NaN there
    assert later_fields(mixed.iloc[1])["vocab"] == 0 and later_fields(mixed.iloc[0])["vocab"] == 7
