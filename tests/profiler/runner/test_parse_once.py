"""The variant label is parsed once per sweep point (issue 23): ``Point.spec``, set by the
plan, is what the prediction, both workload passes and the cache key use (a report's
parses: tests/reports/test_report_parses.py). Parses are counted at the one parse
function, registry.parse_variant."""

from __future__ import annotations

import pickle

import pytest

from attnprof.profiler.predict import cache
from attnprof.scenarios import plan
from attnprof.profiler.predict.points import prediction_record
from attnprof.profiler.runner.worker import measure_point
from attnprof.scenarios.scenario import Scenario


@pytest.mark.parametrize("variant, scope, dtype, layers", [
    ("lsh[n_hashes=2]", "model", "float32", 1),  # small: predicted by a real run
    pytest.param("sparse_strided[combine=interleaved]", "model", "bfloat16", 8,  # fake tensors, composed over depth
                 marks=pytest.mark.slow),
    ("sparse_strided[combine=interleaved]", "attention", "float32", 1),  # a scope note, two layer kinds
])
def test_one_sweep_point_end_to_end_parses_its_label_once(parses, variant, scope, dtype, layers):
    sc = Scenario(variants=(variant,), modes=("plain",), scope=scope, seq_lens=(128,), d_model=32, heads=2,
                  layers=layers, dtype=dtype)
    (point,) = plan.points(sc)  # the one parse
    assert parses == [variant] and point.spec.label == point.variant
    point = pickle.loads(pickle.dumps(point))  # as a forked worker or Ray receives it
    assert plan.shape_problem(point) is None
    assert cache.key_of(point) is not None
    assert prediction_record(point)["status"] == "ok"  # attnprof predict
    record = measure_point(point, {"device": "cpu", "warmup": 0, "repeats": 1})  # predict, memory and timing passes
    assert record.status == "ok", record.reason
    assert parses == [variant]


def test_a_budget_search_parses_each_label_once(parses):
    from attnprof.profiler.predict.points import longest_fitting

    sc = Scenario(variants=("lsh",), modes=("plain",), d_model=32, heads=2, layers=1)
    rows = longest_fitting(sc, budget_bytes=8 << 20, start=128, limit=2048)
    assert rows and parses == ["lsh"]
