"""Reversible residuals (scenarios.stack.reversible): exact gradients against ordinary
autograd, RNG replay, and the caller's RNG stream left alone."""

import pytest
import torch

from attnprof.profiler.records import Shape
from attnprof.scenarios.stack.blocks import REVERSIBLE_REFERENCE, Stack
from attnprof.scenarios.variants.registry import parse_variant

from helpers_stack import VARIANTS, gradients, rel_err


@pytest.mark.parametrize("label", VARIANTS)
def test_reversible_gradients_equal_ordinary_autograd(label):
    """The memory-saving backward (inputs rebuilt from outputs, RNG replayed) gives the
    gradients ordinary autograd gives for the same reversible network."""
    reference, reversible = gradients(label, REVERSIBLE_REFERENCE), gradients(label, "reversible")
    assert len(reference) == len(reversible) > 3
    assert rel_err(reversible, reference) < 1e-5


@pytest.mark.parametrize("label", ["full", "lsh[bucket_size=8,n_hashes=4]", "sparse_strided[combine=interleaved]"])
def test_reversible_parameters_get_gradients_when_the_input_needs_none(label):
    """A stack fed a plain tensor (no requires_grad): its parameters still get the
    gradients ordinary autograd gives, through .backward() and autograd.grad alike."""
    reference = gradients(label, REVERSIBLE_REFERENCE, input_grad=False)
    reversible = gradients(label, "reversible", input_grad=False)
    assert all(g is not None for g in reversible) and len(reversible) > 3
    assert rel_err(reversible, reference) < 1e-5
    shape = Shape(batch=1, seq_len=64, d_model=32, heads=4, layers=2, dtype="float64")
    torch.set_default_dtype(torch.float64)
    stack = Stack(parse_variant(label), shape, "reversible")
    torch.set_default_dtype(torch.float32)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    params = list(stack.parameters())
    torch.manual_seed(1)
    via_grad = torch.autograd.grad((stack(x) ** 2).sum(), params)
    stack.mode = REVERSIBLE_REFERENCE
    torch.manual_seed(1)
    expected = torch.autograd.grad((stack(x) ** 2).sum(), params)
    assert rel_err(via_grad, expected) < 1e-5
    assert all(p.grad is None for p in params)  # autograd.grad accumulates nothing


def test_reversible_leaves_the_callers_rng_stream_alone():
    shape = Shape(batch=1, seq_len=64, d_model=32, heads=4, layers=2)
    stack = Stack(parse_variant("lsh[bucket_size=16]"), shape, "reversible")
    x = torch.randn(1, 64, 32, requires_grad=True)
    torch.manual_seed(7)
    expected = (torch.rand(3), torch.rand(3))
    torch.manual_seed(7)
    first = torch.rand(3)
    stack(x).sum().backward()  # consumes RNG in forward; backward must not
    torch.manual_seed(7)
    torch.rand(3)
    stack(x)  # forward alone advances the stream by exactly what the forward draws
    after_forward = torch.rand(3)
    torch.manual_seed(7)
    torch.rand(3)
    stack(x).sum().backward()
    after_backward = torch.rand(3)
    torch.testing.assert_close(first, expected[0])
    torch.testing.assert_close(after_backward, after_forward)


def test_reversible_without_rng_replay_would_be_caught(monkeypatch):
    """The equality test above can fail: if backward's recompute drew fresh LSH hashes
    instead of replaying the forward's RNG state, the gradients would differ."""
    import contextlib

    from attnprof.scenarios.stack import reversible

    monkeypatch.setattr(reversible.ReplayRNG, "replay", lambda self: contextlib.nullcontext())
    reference = gradients("lsh[bucket_size=8,n_hashes=4]", REVERSIBLE_REFERENCE)
    broken = gradients("lsh[bucket_size=8,n_hashes=4]", "reversible")
    assert rel_err(broken, reference) > 1e-3
