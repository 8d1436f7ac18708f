"""The workload every prediction and measurement runs: the upstream gradient ``dout``, a
non-degenerate model-scope loss, and interleaved variants at scope attention."""

import pytest
import torch

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.workload import Workload, scope_note
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.plan import shape_problem
from attnprof.profiler.predict.points import prediction_record
from attnprof.profiler.runner.worker import measure_point
from attnprof.scenarios.variants.registry import parse_variant, variant_names

# Every built-in at n = 64, and each Sparse Transformer combination.
LABELS = ["full", "sdpa", "talking_heads", "lsh[bucket_size=16]", "lsh[bucket_size=8,n_hashes=2]",
          "sparse_strided", "sparse_fixed[summary=2]", "sparse_strided[combine=multihead]",
          "sparse_strided[combine=interleaved]", "sparse_fixed[combine=interleaved,summary=2]",
          "sliding_window[window=16]"]
MODES = ["plain", "checkpoint", "reversible"]
SMALL = Shape(batch=2, seq_len=64, d_model=32, heads=4, layers=2)
INTERLEAVED = "sparse_strided[combine=interleaved]"


def attention_point(label, n=64, forward_only=False):
    return Point(label, "none", "attention", Shape(batch=2, seq_len=n, d_model=32, heads=4), forward_only)


def test_the_labels_cover_every_built_in_variant():
    assert {n for n in variant_names() if ":" not in n} <= {label.split("[")[0] for label in LABELS}


# --- the upstream gradient ---------------------------------------------------------------------
def test_attention_scope_backward_runs_from_a_real_upstream_gradient():
    """out.backward(dout): the gradients of (out * dout).sum(), dout shaped like out."""
    work = Workload(attention_point("full"))
    out = work.forward()
    assert work.dout.shape == out.shape and work.dout.dtype == out.dtype and not work.dout.requires_grad
    leaves = work.params + work.inputs
    expected = torch.autograd.grad((out * work.dout).sum(), leaves, retain_graph=True)
    work.backward(out)
    for leaf, grad in zip(leaves, expected):
        torch.testing.assert_close(leaf.grad, grad)


def test_model_scope_loss_is_a_fixed_random_projection_of_the_output():
    work = Workload(Point("sdpa", "plain", "model", SMALL))
    x = work.inputs[0]
    loss = work.forward()
    assert loss.dim() == 0 and work.dout.shape == x.shape and not work.dout.requires_grad
    torch.testing.assert_close(loss, (work.module(x) * work.dout).sum())


def test_the_upstream_gradient_is_counted_with_the_inputs():
    """Scope attention: q, k, v and dout, each (B, h, n, dh); model: x and dout, (B, n, d)."""
    attention = account(attention_point("full", n=128), fake=True)
    assert attention.breakdown_bytes["inputs"] == 4 * (2 * 4 * 128 * 8) * 4
    model = account(Point("full", "plain", "model", SMALL), fake=True)
    assert model.breakdown_bytes["inputs"] == 2 * (2 * 64 * 32) * 4
    forward_only = Workload(attention_point("full", forward_only=True))
    assert forward_only.dout is None
    assert account(forward_only.point, fake=True).breakdown_bytes["inputs"] == 3 * (2 * 4 * 64 * 8) * 4


# --- the model-scope loss reaches every parameter ----------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("label", LABELS)
def test_non_zero_gradients_reach_every_parameter(label, mode):
    """out.sum() after the final LayerNorm at default weights would give zero gradients to
    everything but that norm's own weight and bias (measured: an rms of 1e-8, float32
    round-off; the random projection gives 0.5 to 1.5, and 64 for the input)."""
    torch.manual_seed(0)
    work = Workload(Point(label, mode, "model", SMALL))
    work.step()
    named = dict(work.module.named_parameters())
    assert len(named) == len(work.params)

    def rms(grad):
        return 0.0 if grad is None else (grad.norm() / grad.numel() ** 0.5).item()

    silent = {name: rms(p.grad) for name, p in named.items() if not rms(p.grad) > 1e-2}
    assert not silent, f"no gradient reaches {silent}"
    assert rms(work.inputs[0].grad) > 1e-2


# --- interleaved layer kinds at scope attention ------------------------------------------------
def test_interleaved_attention_scope_runs_every_layer_kind():
    assert shape_problem(attention_point(INTERLEAVED)) is None
    work = Workload(attention_point(INTERLEAVED))
    assert [layer.layer_index for layer in work.module] == [0, 1]
    q, k, v = work.inputs
    out = work.forward()
    spec = parse_variant(INTERLEAVED)
    expected = sum(spec.build(32, 4, layer_index=i).core(q, k, v) for i in (0, 1))
    torch.testing.assert_close(out, expected)
    assert len(Workload(attention_point("sparse_strided")).module) == 1


@pytest.mark.parametrize("label", [INTERLEAVED, "sparse_fixed[combine=interleaved,summary=4]"])
def test_interleaved_attention_scope_costs_both_kinds_and_says_so(label):
    merged = label.replace("combine=interleaved", "combine=merged")
    point = attention_point(label, n=256)
    two = account(point, fake=True, count_flops=True)
    assert two.peak_bytes == account(point, fake=False).peak_bytes  # prediction = real run
    # A¹ and A² together cost about what merged does in one layer (same parts, two outputs)
    one = account(attention_point(merged, n=256), fake=True, count_flops=True)
    assert 0.5 * one.peak_bytes < two.peak_bytes < 2 * one.peak_bytes
    assert two.flops_fwd > 0.5 * one.flops_fwd
    note = scope_note(point)
    assert "2 alternating layer kinds" in note and "2 attention layers" in note
    assert scope_note(attention_point(merged)) == scope_note(Point(label, "plain", "model", SMALL)) == ""
    record = prediction_record(point)
    assert record["status"] == "ok" and record["reason"] == note


def test_a_measured_interleaved_record_carries_the_note():
    record = measure_point(attention_point(INTERLEAVED, n=64), {"device": "cpu", "warmup": 0, "repeats": 1})
    assert record.status == "ok", record.reason
    assert record.measured_peak_bytes == record.predicted_peak_bytes
    assert record.reason.startswith(scope_note(attention_point(INTERLEAVED)))


@pytest.mark.parametrize("fake", [True, False])
def test_a_checkpointed_cpu_step_asks_for_no_accelerator(fake, monkeypatch):
    """A checkpoint of CPU tensors asks torch for the accelerator (on a CUDA build a device count,
    which poisons fork: profiler/forks.checkpoints_ask_no_device) unless the workload says "cpu"."""
    from torch.utils.checkpoint import DefaultDeviceType

    asked = []
    monkeypatch.setattr(DefaultDeviceType, "_default_device_type", None)
    real = torch.accelerator.current_accelerator
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: asked.append(1) if check_available else real(False))
    point = Point("sdpa", "checkpoint", "model", Shape(seq_len=64, d_model=32, heads=2, layers=2))
    assert account(point, fake=fake).peak_bytes > 0
    assert asked == []
