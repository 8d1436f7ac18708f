"""The language model in the workload (issue 24: --vocab, --tie-embeddings, --loss-chunks):
token ids in, the LM loss out; the fake-tensor prediction equals the real CPU tracker to
the byte in plain, checkpoint and reversible modes; nonsensical points are refused in one
line; and vocab 0 is today's workload."""

from __future__ import annotations

import pytest
import torch

from attnprof.errors import UserError
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.workload import Workload
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

REAL = "exact (a small point: run on real CPU tensors)"
OPTIONS = [dict(vocab=300), dict(vocab=300, loss_chunks=4), dict(vocab=300, tie_embeddings=True),
           dict(vocab=300, tie_embeddings=True, loss_chunks=3)]


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


def lm_point(mode: str, label: str = "sdpa", forward_only: bool = False, **options) -> Point:
    return Point(label, mode, "model", Shape(batch=2, seq_len=64, d_model=32, heads=4, layers=2, **options),
                 forward_only=forward_only)


@pytest.mark.slow
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_the_fake_prediction_equals_the_real_cpu_tracker_to_the_byte(mode, options):
    point = lm_point(mode, **options)
    fake = account(point, fake=True, count_flops=True)
    real = account(point, fake=False, count_flops=True)
    assert figures(fake) == figures(real)
    fast = predict(point)
    assert fast.method == REAL and figures(fast) == figures(fake)
    assert fast.op_costs == trace_point(point).op_costs()  # fake tensors, every layer


@pytest.mark.slow
@pytest.mark.parametrize("label", ["full", "lsh[n_hashes=2,bucket_size=16]", "sparse_strided[combine=interleaved]"])
def test_other_variants_and_bfloat16_too(label):
    for dtype in ("float32", "bfloat16"):
        point = Point(label, "checkpoint", "model", Shape(batch=1, seq_len=64, d_model=32, heads=4, layers=2,
                                                          vocab=200, loss_chunks=2, dtype=dtype))
        fake = account(point, fake=True, count_flops=True)
        assert figures(predict(point)) == figures(fake)
        if dtype == "float32":
            assert figures(account(point, fake=False, count_flops=True)) == figures(fake)


def test_one_point_of_each_option_fake_equals_real():
    """The quick one of the matrix above: every option at once, in the reversible mode."""
    point = lm_point("reversible", vocab=300, tie_embeddings=True, loss_chunks=3)
    assert figures(account(point, fake=True, count_flops=True)) == figures(account(point, fake=False, count_flops=True))


def test_the_inputs_are_token_ids_and_the_loss_is_a_scalar():
    work = Workload(lm_point("plain", vocab=300, tie_embeddings=True))
    ids, targets = work.inputs
    assert ids.dtype == targets.dtype == torch.int64 and ids.shape == targets.shape == (2, 64)
    assert not ids.requires_grad and work.dout is None
    assert int(ids.max()) < 300 and int(ids.min()) >= 0
    loss = work.forward()
    assert loss.shape == () and loss.dtype == torch.float32 and torch.isfinite(loss)
    work.backward(loss)
    assert len(work.grads()) == len(work.params)  # every parameter, the tied weight once
    untied = Workload(lm_point("plain", vocab=300))
    assert len(untied.params) == len(work.params) + 1


def test_a_forward_only_point_computes_the_loss_without_gradients():
    point = lm_point("plain", forward_only=True, vocab=300, loss_chunks=2)
    work = Workload(point)
    loss = work.forward()
    assert loss.shape == () and not loss.requires_grad
    assert figures(predict(point)) == figures(account(point, fake=True, count_flops=True))
    assert predict(point).flops_bwd == 0


@pytest.mark.parametrize("point, words", [
    (Point("sdpa", "none", "attention", Shape(seq_len=64, d_model=32, heads=4, vocab=100)), "needs scope model"),
    (lm_point("plain", loss_chunks=2), "need a vocabulary"),
    (lm_point("plain", tie_embeddings=True), "need a vocabulary"),
])
def test_nonsense_is_refused_in_one_line(point, words):
    with pytest.raises(UserError, match=words) as caught:
        Workload(point)
    assert "\n" not in str(caught.value)


def test_vocab_zero_is_todays_workload():
    """No embedding, no head: x (B, n, d) in with a gradient, the loss (out * dout).sum()."""
    work = Workload(lm_point("plain"))
    (x,) = work.inputs
    assert x.shape == (2, 64, 32) and x.requires_grad and work.dout.shape == (2, 64, 32)
    assert work.module.lm is None
    assert len(work.params) == len(list(Workload(lm_point("plain", vocab=7)).params)) - 2
