"""Shared by test_blocks.py and test_reversible.py: gradients of a small float64 stack."""

import torch

from attnprof.profiler.records import Shape
from attnprof.scenarios.stack.blocks import Stack
from attnprof.scenarios.variants.registry import parse_variant

# Every built-in variant, LSH with several hash rounds and a bucket size that fits n=64.
VARIANTS = ["full", "sdpa", "talking_heads", "lsh[bucket_size=16,n_hashes=2]", "lsh[bucket_size=8,n_hashes=4]",
            "sparse_strided", "sparse_fixed[summary=2]", "sparse_strided[combine=interleaved]",
            "sliding_window[window=16]", "sliding_window[window=24,causal=false]"]


def gradients(label: str, mode: str, layers: int = 3, input_grad: bool = True, **options):
    """d(loss)/d(input) (if ``input_grad``) and d(loss)/d(every parameter), float64, fixed seeds.
    ``options``: more Shape fields (the block options: mlp, ffn_dim, norm)."""
    shape = Shape(batch=2, seq_len=64, d_model=32, heads=4, layers=layers, dtype="float64", **options)
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
