"""Grouped KV heads (issue 24; Ainslie et al. 2023 GQA, Shazeer 2019 MQA) in every variant:
forward and gradients equal a dense reference that repeats K/V (helpers_dense.py), and, for
every built-in that takes them, equal the same variant with as many K/V heads as query heads
whose K/V projection rows are the grouped ones repeated; the projections shrink; SDPA's
enable_gqa gives the repeat reference's gradients; LSH (shared QK) and a non-divisor refuse."""

import math

import pytest
import torch

from attnprof.scenarios.variants import registry
from attnprof.scenarios.variants.base import VariantError, repeat_kv
from attnprof.scenarios.variants.registry import VariantSpec, parse_variant
from helpers_dense import build, dense_reference

HEADS, D = 4, 32  # head_dim 8
DENSE = ["full", "sdpa", "talking_heads"]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def builtin_with_kv_heads() -> list[str]:
    """Every built-in variant but shared-QK ones (those refuse: test below), with options
    that run at n = 64 (sparse: stride 8, summary 4)."""
    out = []
    for name in registry.builtin_variant_names():
        cls = registry.get_variant(name)
        if cls.shared_qk:
            continue
        options = {k: v for k, v in (("stride", 8), ("summary", 4), ("window", 16)) if k in cls.OPTIONS}
        out.append((name, options))
    return out


def grads(out, params, seed_=1):
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed_), dtype=out.dtype)
    return torch.autograd.grad((out * cotangent).sum(), params)


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("causal", [True, False])
def test_dense_variants_equal_the_repeat_reference(name, kv_heads, causal):
    module = build(name, D, HEADS, kv_heads=kv_heads, causal=causal)
    x = torch.randn(2, 64, D, dtype=torch.float64, requires_grad=True)
    mix = (module.pre_mix, module.post_mix) if name == "talking_heads" else None
    out, ref = module(x), dense_reference(module, x, causal, mix, kv_heads=kv_heads)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    params = [x, *module.parameters()]
    for a, b in zip(grads(out, params), grads(ref, params)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def expanded_twin(module, spec: VariantSpec):
    """The same variant with K/V heads = query heads, its K/V projection rows those of
    ``module`` repeated per group: the model repeat_kv computes, written as weights."""
    h, kv, dh, d = module.heads, module.kv_heads, module.head_dim, module.d_model
    twin = spec.build(d, h, layer_index=module.layer_index)
    wq, wk, wv = module.to_in.weight.detach().split([d, kv * dh, kv * dh], dim=0)
    rows = lambda w: w.view(kv, dh, d).repeat_interleave(h // kv, dim=0).reshape(h * dh, d)  # noqa: E731
    with torch.no_grad():
        twin.to_in.weight.copy_(torch.cat([wq, rows(wk), rows(wv)]))
        twin.to_out.weight.copy_(module.to_out.weight)
        for mine, theirs in zip(twin.core_parameters(), module.core_parameters()):
            mine.copy_(theirs)
    return twin


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("name,options", builtin_with_kv_heads())
def test_every_variant_equals_its_twin_with_repeated_kv_weights(name, options, kv_heads):
    """Forward equal; gradients: x, q rows and core parameters equal, each grouped K/V row
    the sum of its repeated rows' gradients (the chain rule through a repeat)."""
    spec = VariantSpec(name, options)
    torch.set_default_dtype(torch.float64)
    try:
        for layer_index in range(spec.layer_period()):
            module = spec.build(D, HEADS, layer_index=layer_index, kv_heads=kv_heads)
            twin = expanded_twin(module, spec)
            x = torch.randn(2, 64, D, requires_grad=True)
            out, ref = module(x), twin(x)
            torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
            g_mod = grads(out, [x, module.to_in.weight, *module.core_parameters()])
            g_ref = grads(ref, [x, twin.to_in.weight, *twin.core_parameters()])
            torch.testing.assert_close(g_mod[0], g_ref[0], rtol=1e-9, atol=1e-10)
            dh, g = D // HEADS, HEADS // kv_heads
            rq, rk, rv = g_ref[1].split([D, D, D], dim=0)
            folded = lambda w: w.view(kv_heads, g, dh, D).sum(1).reshape(kv_heads * dh, D)  # noqa: E731
            torch.testing.assert_close(g_mod[1], torch.cat([rq, folded(rk), folded(rv)]), rtol=1e-9, atol=1e-10)
            for a, b in zip(g_mod[2:], g_ref[2:]):
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("kv_heads,width", [(1, D + 2 * 8), (2, D + 2 * 16), (4, 3 * D), (0, 3 * D)])
def test_the_kv_projection_shrinks_to_kv_heads_times_head_dim(kv_heads, width):
    module = VariantSpec("full").build(D, HEADS, kv_heads=kv_heads)
    assert tuple(module.to_in.weight.shape) == (width, D)
    q, k, v = module.project(torch.randn(2, 16, D))
    assert q.shape == (2, HEADS, 16, 8) and k.shape == v.shape == (2, kv_heads or HEADS, 16, 8)


def test_repeat_kv_is_llamas_expand_and_reshape():
    t = torch.randn(2, 2, 5, 3)
    out = repeat_kv(t, 3)
    assert out.shape == (2, 6, 5, 3)
    for j in range(6):
        assert torch.equal(out[:, j], t[:, j // 3])
    assert repeat_kv(t, 1) is t


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_sdpa_enable_gqa_gradients_equal_the_repeat_reference(kv_heads, monkeypatch):
    """The core fed K heads (enable_gqa where torch has it) against explicit repeats plus
    softmax attention written here; and the repeat path (native_gqa off) gives the same."""
    from attnprof.scenarios.variants.sdpa import HAS_ENABLE_GQA, SDPAttention

    module = VariantSpec("sdpa").build(D, HEADS, kv_heads=kv_heads)
    assert module.native_gqa == HAS_ENABLE_GQA
    assert SDPAttention.kv_repeat(HEADS, kv_heads) == ("enable_gqa" if HAS_ENABLE_GQA else "repeat")
    q = torch.randn(2, HEADS, 32, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 32, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    g = HEADS // kv_heads

    def reference(q, k, v):
        kr, vr = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        logits = q @ kr.transpose(-1, -2) / math.sqrt(8)
        logits = logits.masked_fill(torch.ones(32, 32, dtype=torch.bool).triu(1), -math.inf)
        return logits.softmax(-1) @ vr

    for native in (HAS_ENABLE_GQA, False):
        monkeypatch.setattr(SDPAttention, "native_gqa", native)
        out, ref = module.attend(q, k, v), reference(q, k, v)
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
        for a, b in zip(grads(out, [q, k, v]), grads(ref, [q, k, v])):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_kv_repeat_says_how_kv_reach_the_query_heads():
    from attnprof.scenarios.variants.sdpa import HAS_ENABLE_GQA

    assert parse_variant("full").kv_repeat(4, 1) == "repeat"
    assert parse_variant("full").kv_repeat(4, 4) == parse_variant("full").kv_repeat(4, 0) == ""
    assert parse_variant("sdpa").kv_repeat(4, 2) == ("enable_gqa" if HAS_ENABLE_GQA else "repeat")
    assert parse_variant("sdpa").kv_repeat(4, 0) == ""


def one_line(fn) -> str:
    with pytest.raises(VariantError) as exc:
        fn()
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_lsh_shared_qk_refuses_grouped_kv_heads_in_one_line(kv_heads):
    text = one_line(lambda: VariantSpec("lsh").build(D, HEADS, kv_heads=kv_heads))
    assert "shares one tensor for queries and keys" in text
    VariantSpec("lsh").build(D, HEADS, kv_heads=HEADS)  # as many K/V heads as heads: fine


def test_a_kv_heads_that_does_not_divide_heads_is_refused_in_one_line():
    assert "does not divide heads 4" in one_line(lambda: VariantSpec("full").build(D, HEADS, kv_heads=3))


def test_a_plug_in_without_the_new_keywords_still_builds_by_default(tmp_path, monkeypatch):
    """build() passes kv_heads/rope only when set, so a plug-in __init__ written before them works."""
    (tmp_path / "old_attn.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Old(FullAttention):\n"
        "    def __init__(self, d_model, heads, *, layer_index=0, **options):\n"
        "        super().__init__(d_model, heads, layer_index=layer_index, **options)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = parse_variant("old_attn:Old").build(D, HEADS)
    assert module(torch.randn(1, 8, D)).shape == (1, 8, D)
