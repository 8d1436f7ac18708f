"""From a scenario to its points (scenarios/plan.py): series order, modes per scope,
batches per length, shape problems, and one-line errors."""

from __future__ import annotations

import pytest

from attnprof.errors import UserError
from attnprof.profiler.records import MODES, NO_MODE, Point, Shape, ShapeError
from attnprof.scenarios.plan import PlanError, modes_of, points, series, shape_at, shape_problem
from attnprof.scenarios.scenario import Scenario, ScenarioError
from attnprof.scenarios.variants.base import VariantError

SMALL = dict(d_model=32, heads=4, layers=1)


def one_line(kind, fn) -> str:
    with pytest.raises(kind) as info:
        fn()
    text = str(info.value)
    assert text and "\n" not in text and isinstance(info.value, UserError)
    return text


def test_series_are_variant_by_mode_in_the_scenarios_order_lengths_ascending():
    sc = Scenario(variants=("sdpa", "lsh[n_hashes=2]"), modes=("reversible", "plain"), seq_lens=(512, 128, 256),
                  **SMALL)
    plan = series(sc)
    assert [(s[0].variant, s[0].mode) for s in plan] == [
        ("sdpa", "reversible"), ("sdpa", "plain"), ("lsh[n_hashes=2]", "reversible"), ("lsh[n_hashes=2]", "plain")]
    for s in plan:
        assert [p.shape.seq_len for p in s] == [128, 256, 512]  # the unit of OOM/timeout skipping
        assert {(p.variant, p.mode, p.scope) for p in s} == {(s[0].variant, s[0].mode, "model")}
    assert points(sc) == [p for s in plan for p in s]


def test_repeated_variants_modes_and_lengths_count_once():
    sc = Scenario(variants=("full", "lsh[n_hashes=2]", "full", "lsh[ n_hashes = 2 ]"),
                  modes=("plain", "plain", "checkpoint"), seq_lens=(256, 256, 128), **SMALL)
    plan = series(sc)
    assert [(s[0].variant, s[0].mode) for s in plan] == [
        ("full", "plain"), ("full", "checkpoint"), ("lsh[n_hashes=2]", "plain"), ("lsh[n_hashes=2]", "checkpoint")]
    assert all(len(s) == 2 for s in plan)


def test_no_modes_means_every_mode_and_no_variants_means_every_registered_variant():
    sc = Scenario(variants=(), modes=(), seq_lens=(256,), **SMALL)
    plan = series(sc)
    modes = {s[0].mode for s in plan}
    assert modes == set(MODES)
    variants = list(dict.fromkeys(s[0].variant for s in plan))
    assert {"full", "sdpa", "lsh", "sparse_strided", "sparse_fixed", "talking_heads", "sliding_window"} <= set(variants)
    assert len(plan) == len(variants) * len(MODES)


def test_scope_attention_has_one_series_per_variant_with_mode_none():
    # modes do not apply to the core alone: even a mode the stack would refuse is ignored
    sc = Scenario(variants=("full", "sdpa"), modes=("plain", "sideways"), scope="attention", seq_lens=(128,), **SMALL)
    assert modes_of(sc) == [NO_MODE]
    plan = series(sc)
    assert [(s[0].variant, s[0].mode, s[0].scope) for s in plan] == [("full", "none", "attention"),
                                                                      ("sdpa", "none", "attention")]


def test_points_carry_the_scenarios_shape_and_forward_only():
    sc = Scenario(variants=("sdpa",), modes=("plain",), seq_lens=(128,), batch=3, d_model=48, heads=3, layers=5,
                  dtype="bf16", ff_chunks=2, forward_only=True)
    (point,) = points(sc)
    assert point.shape == Shape(seq_len=128, batch=3, d_model=48, heads=3, layers=5, dtype="bfloat16", ff_chunks=2)
    assert point.forward_only is True


def test_lengths_from_min_to_max_are_powers_of_two():
    sc = Scenario(variants=("sdpa",), modes=("plain",), min_len=100, max_len=1000, **SMALL)
    assert [p.shape.seq_len for p in points(sc)] == [100, 200, 400, 800]


def test_tokens_per_batch_sets_each_lengths_batch():
    sc = Scenario(variants=("sdpa",), modes=("plain",), seq_lens=(512, 1024, 4096), tokens_per_batch=4096, **SMALL)
    assert {p.shape.seq_len: p.shape.batch for p in points(sc)} == {512: 8, 1024: 4, 4096: 1}
    uneven = Scenario(variants=("sdpa",), modes=("plain",), seq_lens=(3000,), tokens_per_batch=4096, **SMALL)
    assert [p.shape.batch for p in points(uneven)] == [1]  # rounds down, never to 0
    assert "batch would be 0" in one_line(ScenarioError, lambda: Scenario(seq_lens=(8192,), tokens_per_batch=4096))


def test_plan_errors_are_one_line():
    assert "unknown scope 'kernel'" in one_line(PlanError, lambda: series(Scenario(scope="kernel", seq_lens=(128,))))
    assert "unknown mode 'sideways'" in one_line(PlanError, lambda: series(
        Scenario(variants=("sdpa",), modes=("plain", "sideways"), seq_lens=(128,))))
    assert "no sequence lengths between 512 and 256" in one_line(PlanError, lambda: series(
        Scenario(variants=("sdpa",), min_len=512, max_len=256)))
    assert "unknown variant 'nope'" in one_line(VariantError, lambda: series(Scenario(variants=("nope",))))
    assert "n_hashes" in one_line(VariantError, lambda: series(Scenario(variants=("lsh[n_hashes=x]",))))
    assert "not divisible" in one_line(ShapeError, lambda: series(Scenario(variants=("sdpa",), d_model=30, heads=4)))
    assert "positive" in one_line(PlanError, lambda: shape_at(Scenario(), 0))


def test_shape_problem_says_why_a_point_cannot_run_and_none_when_it_can():
    def point(variant, n, scope="model"):
        return Point(variant, "plain", scope, Shape(seq_len=n, d_model=32, heads=4, layers=2))

    assert shape_problem(point("lsh[bucket_size=64]", 256)) is None
    problem = shape_problem(point("lsh[bucket_size=64]", 96))  # n must be a multiple of 2 * bucket_size
    assert problem and "bucket_size" in problem and "\n" not in problem
    assert "stride" in shape_problem(point("sparse_strided[stride=16]", 40))
    assert shape_problem(point("sparse_strided[combine=interleaved]", 256)) is None
    # interleaving alternates patterns across blocks: scope attention runs one core of each kind
    assert shape_problem(point("sparse_strided[combine=interleaved]", 256, "attention")) is None
    assert "unknown variant" in shape_problem(point("nope", 256))
    assert all(shape_problem(p) is None for p in points(Scenario(variants=("full", "sdpa"), seq_lens=(64,), **SMALL)))
