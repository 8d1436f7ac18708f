"""The depth composition keeps the peak split (issue 24): composed, a language-model stack's
``lm_head_loss`` and the op holding the peak (and its pass: forward, backward or the
optimizer step) equal the plain full-depth fake run's, in every mode."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.compose import TRACED_PERIODS, Composition
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def figures(acc) -> tuple:
    return (acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd,
            acc.peak_op, acc.peak_pass)


def point(mode: str, layers: int = 7, d_model: int = 32, forward_only: bool = False, **options) -> Point:
    return Point("sdpa", mode, "model", Shape(batch=2, seq_len=128, d_model=d_model, heads=4, layers=layers,
                                              **options), forward_only=forward_only)


def check(p: Point):
    fast, slow = predict(p), account(p, fake=True, count_flops=True)
    assert fast.method == f"composed from L={TRACED_PERIODS}"
    assert figures(fast) == figures(slow), p
    return fast


@pytest.mark.parametrize("options", [dict(vocab=500), dict(vocab=500, loss_chunks=4),
                                     dict(vocab=500, tie_embeddings=True, loss_chunks=2)],
                         ids=["vocab", "chunks", "tied-chunks"])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_the_lm_head_loss_and_the_peak_op_compose_to_the_byte(mode, options):
    fast = check(point(mode, **options))
    assert fast.breakdown_bytes["lm_head_loss"] > 0 and fast.peak_op and fast.peak_pass == "backward"


def test_a_peak_inside_the_loss_is_the_same_op_composed():
    fast = check(point("plain", vocab=500))
    assert fast.peak_op.startswith("_log_softmax_backward_data")
    assert fast.breakdown_bytes["lm_head_loss"] == 3 * 2 * 128 * 500 * 4 + 8  # three fp32 (B, n, V) tensors


def test_a_peak_inside_the_optimizer_step_composes_with_its_op():
    fast = check(point("checkpoint", d_model=64, optimizer="adamw", optimizer_impl="foreach"))
    assert fast.peak_pass == "step" and fast.peak_op.startswith("_foreach")


def test_forward_only_and_no_vocabulary():
    assert check(point("plain", vocab=500, forward_only=True)).peak_pass == "forward"
    assert "lm_head_loss" not in check(point("reversible")).breakdown_bytes


def test_the_composition_reproduces_the_traced_peak_op():
    traced = trace_point(point("plain", layers=TRACED_PERIODS, vocab=500), marks=True)
    assert Composition.of(traced).peak_op(TRACED_PERIODS) == (traced.peak_op, traced.peak_pass) != ("", "")
