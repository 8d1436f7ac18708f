"""--precision (issue 24): the pure choices are --dtype's (the same points, the same figures);
amp-* keeps float32 parameters and sets Shape.autocast; a conflict with --dtype, or an unknown
value, is one line and exit 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from attnprof.api.overrides import build_scenario
from attnprof.cli import app
from attnprof.errors import UserError
from attnprof.profiler.records import later_label
from attnprof.scenarios.plan import points, shape_at
from attnprof.scenarios.scenario import Scenario, ScenarioError

runner = CliRunner()
SMALL = ["-n", "64", "-v", "sdpa", "--layers", "1", "--d-model", "32", "--heads", "2", "--mode", "plain"]


@pytest.mark.parametrize("precision,dtype,autocast", [("fp32", "float32", ""), ("bf16", "bfloat16", ""),
                                                      ("fp16", "float16", ""), ("amp-bf16", "float32", "bfloat16"),
                                                      ("amp-fp16", "float32", "float16")])
def test_each_precision_sets_the_shape(precision, dtype, autocast):
    sc = build_scenario(precision=precision, seq_lens=[64], variants="sdpa")
    shape = shape_at(sc, 64)
    assert (shape.dtype, shape.autocast) == (dtype, autocast)


def test_pure_precisions_are_the_dtype_points_themselves():
    by_dtype = points(build_scenario(dtype="bf16", seq_lens=[64], variants="sdpa"))
    by_precision = points(build_scenario(precision="bf16", seq_lens=[64], variants="sdpa"))
    assert [p.key() for p in by_dtype] == [p.key() for p in by_precision]
    assert points(build_scenario(seq_lens=[64], variants="sdpa"))[0].shape == by_dtype[0].shape.__class__(
        seq_len=64, batch=1, d_model=256, heads=4, layers=2)  # default: float32, no autocast


def test_an_amp_point_says_so_in_its_label():
    point = points(build_scenario(precision="amp-bf16", seq_lens=[64], variants="sdpa"))[0]
    assert later_label(point.identity()) == "autocast=bfloat16"


@pytest.mark.parametrize("kw", [dict(precision="amp-bf16", dtype="bf16"), dict(precision="bf16", dtype="fp32"),
                                dict(precision="fp64"), dict(precision="amp")])
def test_conflicts_and_unknown_values_are_one_line(kw):
    with pytest.raises(UserError) as err:
        build_scenario(seq_lens=[64], variants="sdpa", **kw)
    assert "\n" not in str(err.value)


def test_a_scenario_file_is_checked_too():
    with pytest.raises(ScenarioError, match="keeps float32 parameters"):
        Scenario(dtype="bfloat16", precision="amp-bf16")


def test_dtype_alone_overrides_a_scenarios_precision():
    sc = build_scenario(Scenario(precision="amp-bf16"), dtype="fp16", seq_lens=[64], variants="sdpa")
    assert (sc.precision, shape_at(sc, 64).autocast, shape_at(sc, 64).dtype) == ("", "", "float16")


@pytest.mark.slow
def test_the_cli_predicts_amp_and_refuses_a_conflict_with_exit_2():
    ok = runner.invoke(app, ["predict", "--precision", "amp-bf16", *SMALL])
    assert ok.exit_code == 0, ok.output
    assert "autocast copies" in ok.output
    bad = runner.invoke(app, ["predict", "--precision", "amp-fp16", "--dtype", "bf16", *SMALL])
    assert bad.exit_code == 2 and "conflicts with --dtype" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_the_cli_predicts_amp_on_a_gpu_model():
    result = runner.invoke(app, ["predict", "--precision", "amp-bf16", "--gpu", "h100-sxm", *SMALL])
    assert result.exit_code == 0, result.output
    assert "h100-sxm" in result.output
