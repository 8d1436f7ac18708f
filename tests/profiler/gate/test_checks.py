"""Field types of a record or a baseline point (profiler/gate/checks.py), read from
PointRecord's annotations: the first problem in one phrase, never arithmetic on a string."""

from __future__ import annotations

import pytest

from attnprof.profiler.gate.checks import MAX_INT, field_problem, record_problem


@pytest.mark.parametrize("value, problem", [
    ([1], "is list, not a JSON object"), ({"variant": "x", "status": "ok"}, "lacks field mode"),
    ({"variant": 1}, "variant must be a string"), ({"variant": "x", "mode": "plain", "seq_len": True},
                                                  "seq_len must be a positive integer"),
])
def test_record_problem_names_the_first_problem(value, problem):
    assert problem in record_problem(value, ("variant", "mode", "seq_len", "status"))


def test_an_absent_field_with_a_default_passes_but_status_is_always_required():
    assert field_problem({}, "ff_chunks") is None  # an older record lacks it: the default
    assert field_problem({}, "status") == "lacks field status"
    assert field_problem({}, "variant") == "lacks field variant"


@pytest.mark.parametrize("name, value, problem", [
    ("seq_len", 0, "seq_len must be a positive integer, got 0"),
    ("measured_peak_bytes", -1, "measured_peak_bytes must be a byte count (an integer >= 0) or null, got -1"),
    ("seq_len", MAX_INT + 1, "seq_len must be a positive integer"),
    ("time_fwd_ms", float("nan"), "time_fwd_ms must be a finite number from 0 to 2**63 - 1 or null"),
    ("time_fwd_ms", 1e308, "time_fwd_ms must be a finite number from 0 to 2**63 - 1 or null"),  # was "a finite number"
    ("time_fwd_ms", -1.0, "time_fwd_ms must be a finite number from 0 to 2**63 - 1 or null"),
    ("forward_only", 1, "forward_only must be true or false"),
    ("variant", None, "variant is null"),
    ("status", "exploded", "unknown status 'exploded' (one of ok, "),
])
def test_each_kind_of_bad_value_is_named(name, value, problem):
    assert field_problem({name: value}, name).startswith(problem)


def test_null_is_fine_where_the_field_is_optional_and_a_long_value_is_cut():
    assert field_problem({"time_fwd_ms": None}, "time_fwd_ms") is None
    assert field_problem({"measured_peak_bytes": 12}, "measured_peak_bytes") is None
    text = field_problem({"variant": ["x" * 100]}, "variant")
    assert text.endswith("...") and len(text) < 100


def test_a_later_amount_field_may_be_0_and_the_shape_sizes_may_not():
    """issue 24: ffn_dim 0 means 4 x d_model (records.later kind "amount"), not a bad size."""
    assert field_problem({"ffn_dim": 0}, "ffn_dim") is None and field_problem({"mlp": "swiglu"}, "mlp") is None
    assert field_problem({"ffn_dim": -1}, "ffn_dim") == "ffn_dim must be an integer >= 0, got -1"
    assert field_problem({"d_model": 0}, "d_model") == "d_model must be a positive integer, got 0"
