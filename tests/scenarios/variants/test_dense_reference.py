"""full, sdpa and talking_heads against a plain dense float64 reference written here."""

import math

import pytest
import torch

from attnprof.scenarios.variants.registry import VariantSpec, get_variant, parse_variant, variant_names


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


@pytest.mark.parametrize("name", ["full", "sdpa", "talking_heads"])
@pytest.mark.parametrize("causal", [True, False])
def test_forward_and_gradients_equal_dense_reference(name, causal):
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


@pytest.mark.parametrize("name", ["full", "sdpa", "talking_heads", "sparse_strided", "sparse_fixed"])
def test_causal_variants_never_look_ahead(name):
    module = build(name)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    t = 37
    changed = x.clone()
    changed[:, t + 1:] = torch.randn_like(changed[:, t + 1:])
    torch.testing.assert_close(module(x)[:, : t + 1], module(changed)[:, : t + 1], rtol=0, atol=0)
    assert not torch.allclose(module(x)[:, t + 1:], module(changed)[:, t + 1:])


@pytest.mark.parametrize("name", ["full", "sdpa", "talking_heads"])
def test_bidirectional_option_looks_ahead(name):
    module = build(name, causal=False)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    changed = x.clone()
    changed[:, -1] += 1.0
    assert not torch.allclose(module(x)[:, 0], module(changed)[:, 0])


def test_talking_heads_mixing_changes_the_output():
    """The h x h projections are really applied: identity mixing equals full attention."""
    th = build("talking_heads")
    full = build("full")
    full.load_state_dict({k: v for k, v in th.state_dict().items() if not k.endswith("_mix")})
    x = torch.randn(1, 32, 32, dtype=torch.float64)
    assert not torch.allclose(th(x), full(x))
    with torch.no_grad():
        th.pre_mix.copy_(torch.eye(4))
        th.post_mix.copy_(torch.eye(4))
    torch.testing.assert_close(th(x), full(x))


def test_registry_lists_the_six_variants_with_papers():
    names = variant_names()
    for expected in ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed"]:
        assert expected in names
        cls = get_variant(expected)
        assert cls.description and cls.paper and "arXiv" in cls.paper


def test_duplicate_registration_is_refused():
    from attnprof.scenarios.variants.base import Attention
    from attnprof.scenarios.variants.registry import register_variant

    with pytest.raises(ValueError, match="already registered"):
        @register_variant("full")
        class Another(Attention):
            pass


def test_module_attr_plugin_path_loads_a_users_variant(tmp_path, monkeypatch):
    (tmp_path / "my_attn.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Mine(FullAttention):\n    description = 'mine'\n    paper = 'me, arXiv 0000.00000'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = parse_variant("my_attn:Mine[causal=false]")
    assert spec.label == "my_attn:Mine[causal=false]"
    module = spec.build(32, 4)
    assert module.causal is False
    assert module(torch.randn(1, 8, 32)).shape == (1, 8, 32)
