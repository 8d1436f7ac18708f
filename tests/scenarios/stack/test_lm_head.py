"""The language model's ends (scenarios/stack/lm_head.py): the loss and every gradient equal a
dense reference (plain F.cross_entropy on the whole logits), chunks on and off, in every
mode; a tied embedding is one weight whose gradient sums both uses; the logits and their
gradient are what the tracker holds at the peak (closed form), and about 1/C of them with
C chunks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.stack.blocks import Stack
from attnprof.scenarios.stack.lm_head import IGNORE_INDEX, LanguageModelEnds, causal_lm_loss, shifted
from attnprof.scenarios.variants.registry import parse_variant

B, N, D, V = 2, 32, 16, 50


def dense_reference(weight, hidden, targets):
    """A causal LM's loss as written everywhere: logits in full, shifted by one, mean CE
    (float64 here: no upcast needed)."""
    logits = hidden @ weight.T  # (B, n, V)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1))


@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 32])
def test_the_loss_and_its_gradients_equal_the_dense_reference(chunks):
    torch.manual_seed(0)
    head = torch.nn.Linear(D, V, bias=False, dtype=torch.float64)
    hidden = torch.randn(B, N, D, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(V, (B, N))
    loss = causal_lm_loss(head, hidden, targets, chunks)
    grads = torch.autograd.grad(loss, [hidden, head.weight])
    ref = dense_reference(head.weight, hidden, targets)
    ref_grads = torch.autograd.grad(ref, [hidden, head.weight])
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=0)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)


def test_targets_are_the_next_token_and_the_last_position_has_none():
    targets = torch.tensor([[5, 6, 7], [1, 2, 3]])
    assert shifted(targets).tolist() == [[6, 7, IGNORE_INDEX], [2, 3, IGNORE_INDEX]]


def test_low_precision_logits_are_upcast_to_fp32():
    torch.manual_seed(0)
    head = torch.nn.Linear(D, V, bias=False, dtype=torch.bfloat16)
    hidden = torch.randn(B, N, D, dtype=torch.bfloat16)
    loss = causal_lm_loss(head, hidden, torch.randint(V, (B, N)))
    assert loss.dtype == torch.float32


def stack_and_tokens(mode: str, tie: bool, chunks: int, label: str = "sdpa"):
    shape = Shape(batch=B, seq_len=N, d_model=D, heads=2, layers=2, vocab=V, tie_embeddings=tie,
                  loss_chunks=chunks, dtype="float64")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    try:
        stack = Stack(parse_variant(label), shape, mode)
    finally:
        torch.set_default_dtype(torch.float32)
    ids, targets = torch.randint(V, (B, N)), torch.randint(V, (B, N))
    return stack, ids, targets


def loss_and_grads(stack, ids, targets):
    loss = stack.lm.loss(stack(ids), targets)
    loss.backward()
    return loss.detach(), [p.grad for p in stack.parameters()]


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
@pytest.mark.parametrize("tie", [False, True])
def test_chunked_and_whole_stacks_agree_in_every_mode(mode, tie):
    whole = loss_and_grads(*stack_and_tokens(mode, tie, 1))
    chunked = loss_and_grads(*stack_and_tokens(mode, tie, 4))
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-12, atol=0)
    assert len(chunked[1]) == len(whole[1])
    for got, want in zip(chunked[1], whole[1]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-13)


def test_the_stack_loss_equals_the_dense_reference():
    stack, ids, targets = stack_and_tokens("plain", False, 1)
    loss = stack.lm.loss(stack(ids), targets)
    ref = dense_reference(stack.lm.head.weight, stack(ids), targets)
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("chunks", [1, 4])
def test_a_tied_embedding_is_one_weight_whose_gradient_sums_both_uses(chunks):
    tied = LanguageModelEnds(D, V, tie=True, chunks=chunks).double()
    assert len(list(tied.parameters())) == 1 and tied.head.weight is tied.embed.weight
    untied = LanguageModelEnds(D, V, tie=False, chunks=chunks).double()
    assert len(list(untied.parameters())) == 2
    with torch.no_grad():  # the reference: two separate weights holding the same values
        untied.embed.weight.copy_(tied.embed.weight)
        untied.head.weight.copy_(tied.embed.weight)
    torch.manual_seed(1)
    ids, targets = torch.randint(V, (B, N)), torch.randint(V, (B, N))
    mix = torch.randn(D, D, dtype=torch.float64)  # something between the two ends, as the blocks are
    for ends in (tied, untied):
        ends.loss(torch.tanh(ends.embed(ids) @ mix), targets).backward()
    want = untied.embed.weight.grad + untied.head.weight.grad
    torch.testing.assert_close(tied.embed.weight.grad, want, rtol=1e-12, atol=1e-15)
    assert untied.embed.weight.grad.abs().sum() > 0 and untied.head.weight.grad.abs().sum() > 0


# --- the logits in the tracker's figures ---------------------------------------------------------
LV, LN, LB = 4000, 256, 2  # a vocabulary wide enough that its logits are the largest tensors


def logit_storages(acc, rows: int) -> list:
    """The fp32 storages of ``rows`` x LV logits (or their gradients) live at the peak."""
    return [t for t in acc.largest_at_peak if t["shape"] == [rows, LV] and t["dtype"] == "float32"]


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
def test_the_fp32_logits_and_their_gradient_are_counted_at_the_peak(mode):
    point = Point("sdpa", mode, "model", Shape(batch=LB, seq_len=LN, d_model=32, heads=2, layers=2, vocab=LV))
    acc = predict(point)
    logits_bytes = LB * LN * LV * 4  # closed form: B x n x V fp32
    held = logit_storages(acc, LB * LN)
    assert len(held) >= 2 and all(t["bytes"] == logits_bytes for t in held)  # the log-probabilities and a gradient
    assert acc.peak_bytes >= len(held) * logits_bytes
    # issue 24, peak split: the head's and the loss's storages are their own category, not activations/temporaries
    assert acc.breakdown_bytes["lm_head_loss"] >= len(held) * logits_bytes
    assert all(t["category"] == "lm_head_loss" for t in held)


@pytest.mark.parametrize("mode", ["plain", "checkpoint", "reversible"])
@pytest.mark.parametrize("chunks", [2, 4, 8])
def test_loss_chunks_hold_about_one_chunk_of_logits(mode, chunks):
    def at(c):
        return predict(Point("sdpa", mode, "model", Shape(batch=LB, seq_len=LN, d_model=32, heads=2, layers=2,
                                                        vocab=LV, loss_chunks=c)))

    whole, chunked = at(1), at(chunks)
    rows = LB * LN // chunks
    assert not logit_storages(chunked, LB * LN)  # no whole-sequence logits at the peak
    held = logit_storages(chunked, rows)
    assert held and all(t["bytes"] == LB * LN * LV * 4 // chunks for t in held)
    saved = whole.peak_bytes - chunked.peak_bytes
    whole_logits = sum(t["bytes"] for t in logit_storages(whole, LB * LN))
    # the chunked peak holds the same logit tensors, each 1/C of the size (plus what the
    # recompute of one chunk adds, small beside them)
    assert saved >= (1 - 1 / chunks) * whole_logits * 0.9
    assert saved <= whole_logits
