"""Baseline against run (profiler.gate.compare): the rows one point gives, which figures
gate, when two sides are comparable at all, and points only one side has."""

import pytest

from attnprof.profiler.gate.baseline import read_baseline, update_baseline
from attnprof.profiler.gate.compare import check_comparable, compare, compare_point
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.snapshot import point_of_record, read_run
from attnprof.profiler.gate.verdict import Tolerance
from attnprof.profiler.records import PointRecord

from helpers_gate import LENGTHS, VARIANTS, make_run

MiB = 1 << 20
TOL = Tolerance(2.0, 64 * 1024)


def point(**kw):
    record = PointRecord(variant="full", mode="plain", scope="model", seq_len=256, batch=1, d_model=64, heads=4,
                         head_dim=16, layers=2, dtype="float32", predicted_peak_bytes=10 * MiB,
                         measured_peak_bytes=10 * MiB, measured_by="tensor-tracker", time_fwd_ms=2.0, time_bwd_ms=3.0)
    return {**point_of_record(record.to_row()), **kw}


def verdicts(rows):
    return {r.figure: r.verdict for r in rows}


def test_an_unchanged_point_is_ok_and_its_time_is_reported_never_gated():
    rows = compare_point(point(), point(time_ms=50.0), TOL)
    assert verdicts(rows) == {"predicted_peak_bytes": "ok", "measured_peak_bytes": "ok", "time_ms": "info"}
    assert rows[-1].change_pct == pytest.approx(900.0) and rows[-1].note == "reported, never gated"


def test_growth_beyond_the_margin_regresses_and_shrinking_improves():
    grown = compare_point(point(), point(predicted_peak_bytes=11 * MiB, measured_peak_bytes=9 * MiB), TOL)
    assert verdicts(grown)["predicted_peak_bytes"] == "regression"
    assert verdicts(grown)["measured_peak_bytes"] == "improved"
    assert grown[0].margin_bytes == pytest.approx(0.02 * 10 * MiB) and grown[0].change_pct == pytest.approx(10.0)


def test_a_failed_point_is_a_status_row_and_its_missing_figures_say_nothing_more():
    rows = compare_point(point(), point(status="oom", measured_peak_bytes=None, time_ms=None, reason="OOM"), TOL)
    assert rows[0].figure == "status" and rows[0].verdict == "regression" and rows[0].note == "OOM"
    assert "measured_peak_bytes" not in verdicts(rows)  # the status row reports the failure
    assert verdicts(rows)["predicted_peak_bytes"] == "ok"


def test_an_ok_point_that_lost_a_figure_regresses_and_a_figure_only_now_is_new():
    lost = compare_point(point(), point(measured_peak_bytes=None), TOL)
    assert verdicts(lost)["measured_peak_bytes"] == "regression"
    gained = compare_point(point(measured_peak_bytes=None), point(), TOL)
    assert verdicts(gained)["measured_peak_bytes"] == "new"


def test_only_exact_methods_gate_and_two_methods_never_compare():
    rows = compare_point(point(measured_by="rss"), point(measured_by="rss", measured_peak_bytes=99 * MiB), TOL)
    assert "measured_peak_bytes" not in verdicts(rows)
    with pytest.raises(GateError, match="measured by tensor-tracker in the baseline but by cuda-allocator now"):
        compare_point(point(), point(measured_by="cuda-allocator"), TOL)


def test_another_scenario_or_another_gpu_model_is_not_comparable(tmp_path):
    base = read_run(make_run(tmp_path / "a"))
    check_comparable(base, read_run(make_run(tmp_path / "b", scenario={"warmup": 7})))  # timing does not matter
    with pytest.raises(GateError, match="scenario differs: d_model"):
        check_comparable(base, read_run(make_run(tmp_path / "c", scenario={"d_model": 128})))
    h200 = read_run(make_run(tmp_path / "d", device="cuda", device_name="NVIDIA H200"))
    with pytest.raises(GateError, match="device differs"):
        check_comparable(h200, read_run(make_run(tmp_path / "e", device="cuda", device_name="NVIDIA H100")))
    check_comparable(h200, read_run(make_run(tmp_path / "f", device="cuda", device_name="NVIDIA H200")))


def test_points_one_side_lacks_are_refused_unless_allowed(tmp_path):
    baseline = tmp_path / "baseline.json"
    update_baseline(baseline, make_run(tmp_path / "full"))
    fewer = make_run(tmp_path / "fewer", skip=[(VARIANTS[0], LENGTHS[0])])
    with pytest.raises(GateError, match="1 baseline point\\(s\\) missing from run"):
        compare(baseline, fewer)
    result = compare(read_baseline(baseline), fewer, allow_missing=True)
    assert len(result.missing) == 1 and result.exit_code == 0
    assert result.points_compared == len(VARIANTS) * len(LENGTHS) - 1


def test_another_block_option_is_not_comparable_and_an_older_manifest_without_it_is(tmp_path):
    """issue 24: --mlp/--ffn-dim/--norm are scenario fields the gate compares, where both sides have them."""
    base = read_run(make_run(tmp_path / "a", scenario={"mlp": "gelu", "norm": "layernorm", "ffn_dim": 0}))
    with pytest.raises(GateError, match="scenario differs: mlp is 'gelu' in baseline"):
        check_comparable(base, read_run(make_run(tmp_path / "b", scenario={"mlp": "swiglu"})))
    with pytest.raises(GateError, match="scenario differs: norm"):
        check_comparable(base, read_run(make_run(tmp_path / "c", scenario={"norm": "rmsnorm"})))
    older = read_run(make_run(tmp_path / "d"))
    for name in ("mlp", "ffn_dim", "norm"):
        del older.scenario[name]  # a manifest written before issue 24
    check_comparable(older, read_run(make_run(tmp_path / "e", scenario={"ffn_dim": 64})))
