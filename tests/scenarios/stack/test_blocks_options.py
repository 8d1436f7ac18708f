"""The block options (issue 24: --mlp swiglu, --ffn-dim, --norm rmsnorm) through the whole
tool: the modes keep exact gradients and their memory laws; the prediction equals the real
CPU tracker to the byte and composes by depth exactly; the GPU models read their ops; the
defaults change no figure of the CI baseline; the CLI takes and refuses them in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.measure.accounting import account, measure_cpu
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.compose import TRACED_PERIODS
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.records import IDENTITY_DEFAULTS, Point, PointRecord, Shape, key_of_record, later_label
from attnprof.profiler.timemodel.op_classes import is_known, kernel_class
from attnprof.scenarios.plan import PlanError, check_addressable, points
from attnprof.scenarios.scenario import Scenario, ScenarioError, load_scenario
from attnprof.scenarios.stack.blocks import REVERSIBLE_REFERENCE, Stack
from attnprof.scenarios.variants.registry import parse_variant

from helpers_stack import gradients, rel_err

LLAMA = {"mlp": "swiglu", "norm": "rmsnorm"}  # both options, as Llama's blocks have them
OPTIONS = [LLAMA, {"mlp": "swiglu"}, {"norm": "rmsnorm"}, {**LLAMA, "ffn_dim": 40}]
IDS = ["swiglu+rmsnorm", "swiglu", "rmsnorm", "swiglu+rmsnorm+ffn40"]
LABELS = ["full", "sdpa", "lsh[bucket_size=8,n_hashes=4]", "sparse_fixed[summary=2]"]
MODES = ["plain", "checkpoint", "reversible"]
ROOT = Path(__file__).resolve().parents[3]


# --- the modes: exact gradients ------------------------------------------------------------
slow = pytest.mark.slow
# every variant family with both options (and a d_ff of its own); sdpa with each option alone
CASES = [pytest.param(label, OPTIONS[3], id=f"{label}-{IDS[3]}", marks=() if label == "sdpa" else slow)
         for label in LABELS] + [pytest.param("sdpa", o, id=f"sdpa-{i}") for o, i in zip(OPTIONS[:3], IDS[:3])]


@pytest.mark.parametrize("label, options", CASES)
def test_checkpoint_gradients_equal_plain(label, options):
    plain, ckpt = gradients(label, "plain", **options), gradients(label, "checkpoint", **options)
    assert len(plain) == len(ckpt) > 3
    assert rel_err(ckpt, plain) < 1e-5


@pytest.mark.parametrize("label, options", CASES)
def test_reversible_gradients_equal_ordinary_autograd(label, options):
    """RMSNorm and SwiGLU blocks rebuilt from their outputs give autograd's gradients."""
    reference = gradients(label, REVERSIBLE_REFERENCE, **options)
    reversible = gradients(label, "reversible", **options)
    assert len(reference) == len(reversible) > 3
    assert rel_err(reversible, reference) < 1e-5


@slow
def test_reversible_parameter_gradients_without_an_input_gradient():
    options = OPTIONS[3]
    assert rel_err(gradients("lsh[bucket_size=8,n_hashes=4]", "reversible", input_grad=False, **options),
                   gradients("lsh[bucket_size=8,n_hashes=4]", REVERSIBLE_REFERENCE, input_grad=False, **options)) < 1e-5


def test_the_options_change_the_gradients():
    """The equalities above compare stacks that really are SwiGLU/RMSNorm stacks."""
    base = gradients("sdpa", "reversible", layers=2)
    for options in OPTIONS:
        other = gradients("sdpa", "reversible", layers=2, **options)
        assert len(other) != len(base) or rel_err(other, base) > 1e-3


# --- the modes: memory by depth --------------------------------------------------------------
def peaks(label: str, mode: str, layers_list=(2, 4, 8), n: int = 1024) -> dict:
    return {layers: predict(Point(label, mode, "model", Shape(batch=1, seq_len=n, d_model=64, heads=4, layers=layers,
                                                              ffn_dim=160, **LLAMA)), count_flops=False).peak_bytes
            for layers in layers_list}


def param_bytes(label: str, layers: int) -> int:
    shape = Shape(batch=1, seq_len=1024, d_model=64, heads=4, layers=layers, ffn_dim=160, **LLAMA)
    return sum(p.numel() * 4 for p in Stack(parse_variant(label), shape, "plain").parameters())


@slow
@pytest.mark.parametrize("label", ["full", "sdpa"])
def test_memory_by_depth_with_swiglu_and_rmsnorm(label):
    plain, ckpt, rev = peaks(label, "plain"), peaks(label, "checkpoint"), peaks(label, "reversible")
    per_layer_a, per_layer_b = (plain[4] - plain[2]) / 2, (plain[8] - plain[4]) / 4
    assert per_layer_a > 0 and abs(per_layer_a - per_layer_b) / per_layer_a < 0.05  # plain: linear in L
    assert (ckpt[8] - ckpt[2]) < 0.35 * (plain[8] - plain[2])
    added = param_bytes(label, 8) - param_bytes(label, 2)  # reversible: only parameters and their gradients
    assert 0 < rev[8] - rev[2] <= 2 * added


# --- exact on CPU: fake = real tracker, and the depth composition -----------------------------
def small(label: str, mode: str, layers: int = 2, dtype: str = "float32", **options) -> Point:
    return Point(label, mode, "model", Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=layers, dtype=dtype,
                                             **(options or LLAMA)))


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


@pytest.mark.parametrize("label", ["sdpa", pytest.param("full", marks=slow),
                                   pytest.param("lsh[n_hashes=2,bucket_size=16]", marks=slow),
                                   pytest.param("sparse_strided", marks=slow)])
@pytest.mark.parametrize("mode", MODES)
def test_the_prediction_equals_the_real_cpu_tracker_to_the_byte(label, mode):
    point = small(label, mode)
    assert small_point(point)
    fast, fake = predict(point), account(point, fake=True, count_flops=True)
    assert figures(fast) == figures(fake)
    real = measure_cpu(point)
    assert (real.peak_bytes, real.breakdown_bytes) == (fake.peak_bytes, fake.breakdown_bytes)
    assert real.peak_bytes > 0


def test_swiglu_costs_what_its_extra_tensors_say():
    """Not a copy of the GELU figures: at the same d_ff, SwiGLU's parameters are exactly its
    extra weight less the biases, and its activations are larger (one more hidden tensor)."""
    gelu, swiglu = small("sdpa", "plain", mlp="gelu"), small("sdpa", "plain", mlp="swiglu")
    g, s = account(gelu, fake=True), account(swiglu, fake=True)
    d, d_ff, layers = 32, 128, 2
    weights = lambda point: sum(p.numel() * 4 for p in Stack(parse_variant("sdpa"), point.shape).parameters())
    assert weights(swiglu) - weights(gelu) == layers * 4 * (d * d_ff - d_ff - d)
    assert s.breakdown_bytes["activations"] > g.breakdown_bytes["activations"]


@pytest.fixture()
def fake_path_only(monkeypatch):
    """Every prediction takes the fake-tensor path, where the composition is."""
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


@pytest.mark.parametrize("label", ["sdpa", pytest.param("lsh[bucket_size=32]", marks=slow),
                                   pytest.param("sparse_strided[combine=interleaved]", marks=slow)])
@pytest.mark.parametrize("mode", MODES)
def test_the_depth_composition_is_exact(fake_path_only, label, mode):
    period = parse_variant(label).layer_period()
    point = Point(label, mode, "model", Shape(batch=2, seq_len=256, d_model=32, heads=4, layers=7 * period,
                                              ffn_dim=80, **LLAMA))
    fast = predict(point)
    assert fast.method == f"composed from L={TRACED_PERIODS * period}"
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))


def test_the_composed_largest_storages_at_a_reversible_peak_with_a_narrow_mlp(fake_path_only):
    """A reversible stack whose hidden tensors are as small as its (B, n, d) ones: among the
    equal-sized storages at the peak the composition lists the ones the full run holds (it
    listed already-freed ones before compose's tie fix)."""
    point = Point("sdpa", "reversible", "model", Shape(batch=2, seq_len=256, d_model=32, heads=4, layers=7, ffn_dim=48))
    fast, slow_run = predict(point), account(point, fake=True, count_flops=True)
    assert (fast.peak_bytes, fast.breakdown_bytes) == (slow_run.peak_bytes, slow_run.breakdown_bytes)
    assert fast.largest_at_peak == slow_run.largest_at_peak


@pytest.mark.parametrize("mode", MODES)
def test_the_depth_composition_is_exact_in_bfloat16(fake_path_only, mode):
    point = small("full", mode, layers=7, dtype="bfloat16", **LLAMA)
    fast = predict(point)
    assert fast.method.startswith("composed")
    assert figures(fast) == figures(account(point, fake=True, count_flops=True))


# --- the GPU models read the ops -------------------------------------------------------------
def test_every_op_of_a_swiglu_rmsnorm_step_is_classified():
    ops = {row[1] for mode in MODES for row in trace_point(small("sdpa", mode)).op_costs()}
    assert {op for op in ops if not is_known(op)} == set()
    assert kernel_class("aten::silu") == kernel_class("silu_backward.default") == "elementwise"
    assert kernel_class("rsqrt.default") == "elementwise" and kernel_class("mean.dim") == "reduction"


def test_predict_on_a_gpu_models_swiglu_and_rmsnorm():
    # a wide MLP, so that its saved hidden tensors outweigh what the rest of the step holds at its peak
    common = dict(variants="sdpa", modes="plain", d_model=64, heads=2, layers=2, seq_lens=[256], ffn_dim=2048,
                  gpus="h100-sxm", no_cache=True)
    swiglu = api.predict(mlp="swiglu", norm="rmsnorm", **common).records
    gelu = api.predict(norm="rmsnorm", **common).records  # the same norm: CUDA's fused one saves less than both
    assert len(swiglu) == len(gelu) == 1
    s, g = swiglu[0], gelu[0]
    assert s["mlp"] == "swiglu" and s["norm"] == g["norm"] == "rmsnorm" and s["ffn_dim"] == 2048 and g["mlp"] == "gelu"
    assert s["gpu"] == "h100-sxm" and s["gpu_fits"] is True and s["gpu_time_fwd_ms"] > 0
    assert s["gpu_tensor_peak_bytes"] > g["gpu_tensor_peak_bytes"]  # its third weight, its second hidden tensor


# --- identity, defaults ----------------------------------------------------------------------
def test_the_options_are_identity_and_records_without_them_mean_the_defaults():
    assert {"mlp": "gelu", "ffn_dim": 0, "norm": "layernorm"}.items() <= IDENTITY_DEFAULTS.items()
    plain, llama = small("sdpa", "plain", mlp="gelu"), small("sdpa", "plain", **LLAMA, ffn_dim=40)
    assert plain.key() != llama.key()
    record = PointRecord.for_point(llama).to_row()
    assert (record["mlp"], record["ffn_dim"], record["norm"]) == ("swiglu", 40, "rmsnorm")
    assert key_of_record(record) == llama.key()
    assert later_label(record).split() == ["mlp=swiglu", "ffn_dim=40", "norm=rmsnorm"]
    old = {k: v for k, v in PointRecord.for_point(plain).to_row().items() if k not in ("mlp", "ffn_dim", "norm")}
    assert key_of_record(old) == plain.key() and later_label(old) == ""


def test_the_defaults_predict_the_ci_baselines_figures():
    """Every point of .ci/baseline.json at its shortest length, predicted with today's
    defaults: the same bytes as the baseline holds (the gate's figures did not move)."""
    doc = json.loads((ROOT / ".ci" / "baseline.json").read_text())
    shape_fields = set(Shape.__dataclass_fields__)
    shortest = min(p["seq_len"] for p in doc["points"])
    chosen = [p for p in doc["points"] if p["seq_len"] == shortest]
    assert len(chosen) >= 10
    for p in chosen:
        assert not shape_fields & {"mlp", "ffn_dim", "norm"} & set(p)  # written before issue 24
        point = Point(p["variant"], p["mode"], p["scope"], Shape(**{k: v for k, v in p.items() if k in shape_fields}),
                      p["forward_only"])
        assert predict(point, count_flops=False).peak_bytes == p["predicted_peak_bytes"], point


# --- the scenario, the plan and the command line ---------------------------------------------
def test_a_scenario_carries_the_options_into_every_point(tmp_path):
    path = tmp_path / "llama.toml"
    path.write_text('variants = ["sdpa"]\nmodes = ["plain"]\nseq_lens = [64]\nd_model = 32\nheads = 2\n'
                    'mlp = "swiglu"\nnorm = "rmsnorm"\nffn_dim = 88\n')
    [point] = points(load_scenario(path))
    assert (point.shape.mlp, point.shape.norm, point.shape.ffn_dim, point.shape.d_ff) == ("swiglu", "rmsnorm", 88, 88)
    [default] = points(Scenario(variants=("sdpa",), modes=("plain",), seq_lens=(64,), d_model=32, heads=2))
    assert (default.shape.mlp, default.shape.norm, default.shape.d_ff) == ("gelu", "layernorm", 128)


@pytest.mark.parametrize("values, words", [
    ({"mlp": "relu"}, "mlp must be one of gelu, swiglu, got 'relu'"),
    ({"norm": "batchnorm"}, "norm must be one of layernorm, rmsnorm, got 'batchnorm'"),
    ({"mlp": 3}, "mlp must be a string"),
    ({"ffn_dim": -2}, "ffn_dim must be an integer >= 0"),
    ({"ffn_dim": 1 << 62}, "ffn_dim 2**62 is too large"),
    ({"ffn_dim": 1 << 50, "seq_lens": (4096,)}, "seq_len 4096 is too long: a 1x4096x2**50 feed-forward hidden"),
])
def test_a_bad_option_in_a_scenario_is_one_line(values, words):
    with pytest.raises(ScenarioError) as caught:
        Scenario(**values)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_d_ff_torch_cannot_address_is_refused_by_the_plan():
    shape = Shape(seq_len=1 << 20, batch=1 << 10, d_model=32, heads=1, ffn_dim=1 << 33)
    with pytest.raises(PlanError, match="d_ff feed-forward activations"):
        check_addressable(shape)
    check_addressable(Shape(seq_len=1 << 20, batch=1 << 10, d_model=32, heads=1))  # 4 x d_model: addressable


runner = CliRunner()
SMALL = ["--variant", "sdpa", "--d-model", "32", "--heads", "2", "--layers", "2", "-n", "128"]


def test_the_command_line_predicts_with_the_options():
    result = runner.invoke(app, ["predict", *SMALL, "--mlp", "swiglu", "--norm", "rmsnorm", "--ffn-dim", "88"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert re.search(r"sdpa +reversible +128 +1 +[0-9.]+ KiB", result.stdout), result.stdout
    default = runner.invoke(app, ["predict", *SMALL])
    assert default.exit_code == 0 and default.stdout != result.stdout


@pytest.mark.parametrize("args, words", [
    (["--mlp", "relu"], "mlp must be one of gelu, swiglu"),
    (["--norm", "batchnorm"], "norm must be one of layernorm, rmsnorm"),
    (["--ffn-dim", "-3"], "--ffn-dim must be a positive width"),
    (["--scope", "attention", "--mlp", "swiglu"], "--mlp (for the model's stack) would be ignored"),
    (["--scope", "attention", "--norm", "rmsnorm", "--ffn-dim", "8"], "--ffn-dim, --norm"),
])
def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(args, words):
    given = ["--variant", "sdpa", "--d-model", "32", "--heads", "2", "-n", "128"]
    result = runner.invoke(app, ["predict", *given, *args])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
