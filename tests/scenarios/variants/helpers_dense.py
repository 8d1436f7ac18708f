"""Shared by test_full.py, test_sdpa.py, test_talking_heads.py and test_sparse.py: a plain
dense float64 reference written here, and the checks each dense variant passes against it."""

import math

import torch

from attnprof.scenarios.variants.registry import VariantSpec


def build(name, d_model=32, heads=4, kv_heads=0, rope=False, **options):
    torch.set_default_dtype(torch.float64)
    module = VariantSpec(name, options).build(d_model, heads, kv_heads=kv_heads, rope=rope)
    torch.set_default_dtype(torch.float32)
    return module


def rotary_reference(t, base=10000.0):
    """RoPE as Su et al. 2021 §3.4 write it, one channel pair at a time: the pair (i, i + dh/2)
    (Llama's rotate_half pairing) of position m turned by the angle m * base^(-2i/dh)."""
    n, dh = t.shape[-2], t.shape[-1]
    out = t.clone()
    m = torch.arange(n, dtype=t.dtype)[:, None]  # (n, 1)
    for i in range(dh // 2):
        angle = m * base ** (-2.0 * i / dh)  # (n, 1)
        a, b = t[..., :, i:i + 1], t[..., :, i + dh // 2:i + dh // 2 + 1]
        out[..., :, i:i + 1] = a * angle.cos() - b * angle.sin()
        out[..., :, i + dh // 2:i + dh // 2 + 1] = b * angle.cos() + a * angle.sin()
    return out


def dense_reference(module, x, causal, mix=None, rope=False, kv_heads=None):
    """softmax(QK^T / sqrt(dh) + mask) V with the module's own weights; optional head mixing,
    rotary embedding (rotary_reference) and grouped K/V heads (each repeated for its group of
    g = h / K query heads with repeat_interleave: query head j reads K/V head j // g)."""
    b, n, d = x.shape
    h, dh = module.heads, module.head_dim
    kv = kv_heads or h
    q, k, v = (x @ module.to_in.weight.T).split([d, kv * dh, kv * dh], dim=-1)
    q = q.view(b, n, h, dh).transpose(1, 2)
    k, v = (t.view(b, n, kv, dh).transpose(1, 2).repeat_interleave(h // kv, dim=1) for t in (k, v))
    if rope:
        q, k = rotary_reference(q), rotary_reference(k)
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
