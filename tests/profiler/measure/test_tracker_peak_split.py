"""The peak split in the tracker (issue 24): what the LM head and the loss allocate is its
own category, ``lm_head_loss`` (logits, log-softmax, loss and their gradients, in forward,
backward and the chunked recompute), with the closed form B*n*V*4 bytes per fp32 (B, n, V)
tensor; the op whose output reached the peak and its pass are recorded; real == fake ==
predicted with them, in every mode; a point without a vocabulary keeps its five keys."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.tracker import BASE_CATEGORIES, LM_HEAD_LOSS, MemoryTracker
from attnprof.profiler.measure.workload import Workload
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

B, N, D, V = 2, 64, 32, 300
LOGITS_BYTES = B * N * V * 4  # one fp32 (B, n, V) tensor


def figures(acc) -> tuple:
    return (acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd,
            acc.peak_op, acc.peak_pass)


def lm(mode: str = "plain", forward_only: bool = False, **options) -> Point:
    return Point("sdpa", mode, "model", Shape(batch=B, seq_len=N, d_model=D, heads=4, layers=2, **options),
                 forward_only=forward_only)


def test_the_loss_peak_holds_three_logits_sized_tensors_in_lm_head_loss():
    """At a peak inside the loss's backward: the log-probabilities (saved), their gradient and
    the logits' gradient, each B*n*V*4 bytes, plus the scalar loss and its seed gradient."""
    acc = account(lm(vocab=V), fake=False)
    assert acc.peak_op.startswith("_log_softmax_backward_data") and acc.peak_pass == "backward"
    assert acc.breakdown_bytes[LM_HEAD_LOSS] == 3 * LOGITS_BYTES + 8
    assert all(t["category"] == LM_HEAD_LOSS for t in acc.largest_at_peak[:3])


@pytest.mark.slow
def test_loss_chunks_hold_about_one_chunk_of_the_logits():
    whole = account(lm(vocab=V), fake=False).breakdown_bytes[LM_HEAD_LOSS]
    for chunks in (2, 4):  # one chunk's logits recomputed at a time
        part = account(lm(vocab=V, loss_chunks=chunks), fake=False).breakdown_bytes[LM_HEAD_LOSS]
        assert 3 * LOGITS_BYTES // chunks <= part < whole * 2 // (chunks + 1) + 2 * B * N * D * 4


def test_forward_only_the_peak_is_in_the_loss_forward():
    acc = account(lm(vocab=V, forward_only=True), fake=False)
    assert acc.peak_pass == "forward" and acc.peak_op.startswith(("nll_loss", "_log_softmax"))
    assert acc.breakdown_bytes[LM_HEAD_LOSS] >= 2 * LOGITS_BYTES  # the logits and the log-probabilities


def test_model_states_keep_their_category_inside_the_head():
    """A tied head's weight is a parameter, its gradient a gradient, an autocast copy of it an
    autocast copy: the scope's category is weaker than those (tracker.LM_HEAD_LOSS)."""
    point = lm(vocab=V, tie_embeddings=True, optimizer="sgd")
    plain = account(point, fake=True)
    params = sum(p.numel() * 4 for p in Workload(point).params)  # the tied head adds none
    assert params == sum(p.numel() * 4 for p in Workload(lm(vocab=V, optimizer="sgd")).params) - V * D * 4
    assert plain.breakdown_bytes["parameters"] == params and plain.breakdown_bytes["optimizer_state"] == params
    amp = account(lm(vocab=V, autocast="bfloat16"), fake=True)
    assert amp.breakdown_bytes["autocast_copies"] >= V * D * 2  # the head weight's bf16 copy among them


def test_without_a_vocabulary_the_breakdown_keeps_its_five_keys():
    acc = account(lm(), fake=False)
    assert tuple(acc.breakdown_bytes) == BASE_CATEGORIES and acc.peak_op and acc.peak_pass == "backward"


def test_a_peak_reached_by_registered_tensors_has_no_op():
    import torch

    weight = torch.zeros(8)  # made outside the tracker: registered, not allocated by an op it saw
    with MemoryTracker() as tracker:
        tracker.track([weight], "parameters")
    report = tracker.report()
    assert (report.peak_op, report.peak_pass, report.peak_bytes) == ("", "", 32)


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(vocab=V), dict(vocab=V, loss_chunks=4),
                                     dict(vocab=V, tie_embeddings=True, loss_chunks=3), {}],
                         ids=["vocab", "chunks", "tied-chunks", "no-vocab"])
@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_real_equals_fake_equals_predicted_with_the_split_and_the_peak_op(mode, options):
    point = lm(mode, **options)
    real, fake = account(point, fake=False, count_flops=True), account(point, fake=True, count_flops=True)
    assert figures(real) == figures(fake) and figures(predict(point)) == figures(fake)
    assert (LM_HEAD_LOSS in fake.breakdown_bytes) == bool(options)


def test_one_point_real_equals_fake_equals_predicted():
    """The quick one of the matrix above."""
    point = lm("checkpoint", vocab=V)
    real, fake = account(point, fake=False, count_flops=True), account(point, fake=True, count_flops=True)
    assert figures(real) == figures(fake) == figures(predict(point))
    assert real.breakdown_bytes[LM_HEAD_LOSS] == 3 * LOGITS_BYTES + 8


def test_amp_and_adamw_with_a_vocabulary_predict_what_the_fake_run_counts():
    point = lm(vocab=V, autocast="bfloat16", optimizer="adamw")
    fake = account(point, fake=True, count_flops=True)
    assert figures(predict(point)) == figures(fake) and fake.breakdown_bytes[LM_HEAD_LOSS] >= 3 * LOGITS_BYTES
