"""What autocast kept in float32, read off a traced point (profiler/measure/autocast_ops.py):
the running torch's lists, never assumed."""

from __future__ import annotations

from attnprof.profiler.measure.autocast_ops import dtype_table, kept_in_float32, output_dtypes
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.records import Point, Shape


def point(autocast: str = "bfloat16", label: str = "sdpa") -> Point:
    return Point(label, "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1, autocast=autocast))


def test_under_autocast_the_matmuls_run_in_bfloat16_and_the_parameters_are_cast():
    found = output_dtypes(trace_point(point()))
    assert found[("fwd", "mm.default")] == ["bfloat16"]
    assert "bfloat16" in found[("fwd", "_to_copy.default")]  # the weight casts autocast makes
    assert ("fwd", "native_layer_norm.default") in kept_in_float32(point())  # traced: float32 in, float32 out


def test_without_autocast_everything_is_float32_and_nothing_is_cast():
    found = output_dtypes(trace_point(point("")))
    assert ("fwd", "_to_copy.default") not in found
    assert all(d in ("float32", "int64", "bool") for dtypes in found.values() for d in dtypes)


def test_the_table_lists_every_op_once():
    table = dtype_table(point(label="full"))
    assert table.splitlines()[0] == "| pass | op | output dtypes |"
    assert "| fwd | `_softmax.default` |" in table
