"""Shared by test_full.py, test_sdpa.py, test_talking_heads.py and test_sparse.py: a plain
dense float64 reference written here, and the checks each dense variant passes against it."""

import math

import torch

from attnprof.scenarios.variants.registry import VariantSpec


def build(name, d_model=32, heads=4, **options):
    torch.set_default_dtype(torch.float64)
    module = VariantSpec(name, options).build(d_model, heads)
    torch.set_default_dtype(torch.float32)
    return module


def dense_reference(module, x, causal, mix=None):
    """softmax(QK^T / sqrt(dh) + mask) V with the module's own weights; optional head mixing."""
    b, n, d = x.shape
    h, dh = module.heads, module.head_dim
    q, k, v = (t.view(b, n, h, dh).transpose(1, 2) for t in (x @ module.to_in.weight.T).chunk(3, dim=-1))
    logits = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (b, h, n, n)
    if mix is not None:
        logits = torch.einsum("bhij,hg->bgij", logits, mix[0])
    if causal:
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    weights = logits.softmax(-1)
    if mix is not None:
        weights = torch.einsum("bhij,hg->bgij", weights, mix[1])
    out = (weights @ v).transpose(1, 2).reshape(b, n, d)
    return out @ module.to_out.weight.T


def check_forward_and_gradients_equal_dense_reference(name, causal):
    module = build(name, causal=causal)
    x = torch.randn(2, 64, 32, dtype=torch.float64, requires_grad=True)
    mix = (module.pre_mix, module.post_mix) if name == "talking_heads" else None
    out, ref = module(x), dense_reference(module, x, causal, mix)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    cotangent = torch.randn_like(out)  # a generic direction, so every gradient entry matters
    params = [x, *module.parameters()]
    g_out = torch.autograd.grad((out * cotangent).sum(), params)
    g_ref = torch.autograd.grad((ref * cotangent).sum(), params)
    assert len(g_out) == 3 + (2 if mix else 0)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def check_causal_never_looks_ahead(name):
    module = build(name)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    t = 37
    changed = x.clone()
    changed[:, t + 1:] = torch.randn_like(changed[:, t + 1:])
    torch.testing.assert_close(module(x)[:, : t + 1], module(changed)[:, : t + 1], rtol=0, atol=0)
    assert not torch.allclose(module(x)[:, t + 1:], module(changed)[:, t + 1:])


def check_bidirectional_option_looks_ahead(name):
    module = build(name, causal=False)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    changed = x.clone()
    changed[:, -1] += 1.0
    assert not torch.allclose(module(x)[:, 0], module(changed)[:, 0])
