"""api/capacity.py: the report's capacity predictions after a sweep, within their time budget."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


def test_capacity_predictions_within_their_budget_fill_the_report_cache(tmp_path):
    """No clock read: a budget of 0 s predicts nothing; a generous one predicts the one
    series of a tiny scenario (how a deadline cuts a long run short is the pool's test)."""
    assert api.capacity_for_report(api.build_scenario("default"), tmp_path, seconds=0) == (0, 0.0)
    sc = api.build_scenario(variants=["sdpa"], scope="attention", min_len=64, max_len=64, d_model=32, heads=2)
    count, took_s = api.capacity_for_report(sc, tmp_path, seconds=600)
    assert count > 0 and took_s >= 0
