"""api/predicting.py: predict() returns records and a table; a budget finds the longest fitting length."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


def test_predict_returns_records_and_a_table():
    result = api.predict(variants=["sdpa"], modes=["plain"], seq_lens=[1024], d_model=64, heads=4)
    assert [r["seq_len"] for r in result.records] == [1024] and result.records[0]["predicted_peak_bytes"] > 0
    assert "sdpa" in result.table()


def test_predict_with_a_budget_finds_the_longest_fitting_length():
    result = api.predict(variants="full", modes="plain", d_model=64, heads=4, layers=1, budget="64MiB")
    assert result.budget_bytes == 64 << 20
    assert result.records[0]["predicted_peak_bytes"] <= 64 << 20 < 2 ** 40


def test_predict_refuses_an_unreadable_budget():
    with pytest.raises(UserError, match="cannot parse size"):
        api.predict(budget="lots")
