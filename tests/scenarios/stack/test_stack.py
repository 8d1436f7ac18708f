"""Checkpointed and reversible stacks: exact gradients, and memory that behaves as the papers say."""

import pytest
import torch

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point
from attnprof.scenarios.variants.registry import VariantSpec, parse_variant
from attnprof.profiler.records import Shape
from attnprof.scenarios.stack.blocks import REVERSIBLE_REFERENCE, Stack

# Every built-in variant, LSH with several hash rounds and a bucket size that fits n=64.
VARIANTS = ["full", "sdpa", "talking_heads", "lsh[bucket_size=16,n_hashes=2]", "lsh[bucket_size=8,n_hashes=4]",
            "sparse_strided", "sparse_fixed[summary=2]", "sparse_strided[combine=interleaved]"]


def gradients(label: str, mode: str, layers: int = 3, input_grad: bool = True):
    """d(loss)/d(input) (if ``input_grad``) and d(loss)/d(every parameter), float64, fixed seeds."""
    shape = Shape(batch=2, seq_len=64, d_model=32, heads=4, layers=layers, dtype="float64")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    stack = Stack(parse_variant(label), shape, mode)
    torch.set_default_dtype(torch.float32)
    x = torch.randn(2, 64, 32, dtype=torch.float64, requires_grad=input_grad)
    torch.manual_seed(1)  # the forward's randomness (LSH rotations) starts here on both sides
    (stack(x) ** 2).sum().backward()
    return ([x.grad] if input_grad else []) + [p.grad for p in stack.parameters()]


def rel_err(a, b):
    return max(((x - y).norm() / y.norm().clamp_min(1e-300)).item() for x, y in zip(a, b))


@pytest.mark.parametrize("label", VARIANTS)
def test_checkpoint_gradients_equal_plain(label):
    plain, ckpt = gradients(label, "plain"), gradients(label, "checkpoint")
    assert len(plain) == len(ckpt) > 3
    assert rel_err(ckpt, plain) < 1e-5


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


def peaks(label: str, mode: str, layers_list=(2, 4, 8), n: int = 2048):
    out = {}
    for layers in layers_list:
        shape = Shape(batch=1, seq_len=n, d_model=64, heads=4, layers=layers)
        acc = predict(Point(label, mode, "model", shape), count_flops=False)
        out[layers] = (acc.peak_bytes, acc.breakdown_bytes)
    return out


def param_bytes(label: str, layers: int) -> int:
    shape = Shape(batch=1, seq_len=2048, d_model=64, heads=4, layers=layers)
    return sum(p.numel() * 4 for p in Stack(parse_variant(label), shape, "plain").parameters())


@pytest.mark.parametrize("label", ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed"])
def test_memory_by_depth_follows_the_papers(label):
    plain = {k: v[0] for k, v in peaks(label, "plain").items()}
    ckpt = {k: v[0] for k, v in peaks(label, "checkpoint").items()}
    rev = {k: v[0] for k, v in peaks(label, "reversible").items()}
    # plain: linear in L (equal increments per added layer)
    per_layer_a, per_layer_b = (plain[4] - plain[2]) / 2, (plain[8] - plain[4]) / 4
    assert per_layer_a > 0 and abs(per_layer_a - per_layer_b) / per_layer_a < 0.05
    # checkpoint: grows far more slowly than plain
    assert (ckpt[8] - ckpt[2]) < 0.35 * (plain[8] - plain[2])
    # reversible: grows only by the added layers' parameters and their gradients (plus,
    # for LSH, each layer's stored hash rotations: (head_dim, n_hashes, n_buckets/2) fp32)
    added = param_bytes(label, 8) - param_bytes(label, 2)
    hash_state = 6 * 16 * 2 * (2048 // 64 // 2) * 4 if label == "lsh" else 0
    assert rev[8] - rev[2] <= 2 * added + hash_state
    assert rev[8] - rev[2] > 0
