"""The stack (scenarios.stack.blocks): checkpointed gradients are exact, and memory by depth
behaves as the papers say in every mode."""

import pytest

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.stack.blocks import Stack
from attnprof.scenarios.variants.registry import parse_variant

from helpers_stack import VARIANTS, gradients, rel_err


@pytest.mark.parametrize("label", VARIANTS)
def test_checkpoint_gradients_equal_plain(label):
    plain, ckpt = gradients(label, "plain"), gradients(label, "checkpoint")
    assert len(plain) == len(ckpt) > 3
    assert rel_err(ckpt, plain) < 1e-5


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


@pytest.mark.parametrize("label", ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed",
                                   "sliding_window"])
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
