"""Sparse Transformer attention (Child et al. 2019, arXiv 1904.10509): index sets, exactness
against a dense masked reference, causality, option errors, fake-mode runs and memory order."""

import functools
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.scenarios.variants.base import VariantError
from attnprof.scenarios.variants.sparse import FixedSparseAttention, StridedSparseAttention
from attnprof.scenarios.variants.sparse_patterns import default_stride, fixed_sets, strided_sets
from attnprof.scenarios.variants.registry import get_variant, parse_variant

from helpers_dense import check_causal_never_looks_ahead

VARIANTS = {"sparse_strided": StridedSparseAttention, "sparse_fixed": FixedSparseAttention}
# (combine, layer_index): interleaved uses A¹ in even layers and A² in odd ones.
COMBINES = [("merged", 0), ("multihead", 0), ("interleaved", 0), ("interleaved", 1), ("interleaved", 2)]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def build(name, d_model=32, heads=4, layer_index=0, **options):
    return VARIANTS[name](d_model, heads, layer_index=layer_index, **options)


# --- 1. the index sets are the paper's: test_sparse_patterns.py ----------------------------
@functools.lru_cache(maxsize=None)
def dense_sets(name, n, l, c, causal):
    """(A¹, A²) as (n, n) bool masks, from the index-set functions."""
    m1, m2 = torch.zeros(n, n, dtype=torch.bool), torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        a1, a2 = strided_sets(i, n, l, causal) if name == "sparse_strided" else fixed_sets(i, n, l, c, causal)
        m1[i, sorted(a1)], m2[i, sorted(a2)] = True, True
    return m1, m2


def reference(module, x, name, l, c):
    b, n, d = x.shape
    h, combine = module.heads, module.combine
    m1, m2 = dense_sets(name, n, l, c, module.causal)
    if combine == "merged":
        per_head = [m1 | m2] * h
    elif combine == "multihead":
        per_head = [m1] * (h // 2) + [m2] * (h // 2)
    else:
        per_head = [m1 if module.layer_index % 2 == 0 else m2] * h
    mask = torch.stack(per_head)  # (h, n, n)
    empty = ~mask.any(-1, keepdim=True)  # (h, n, 1): a query with no key gets output 0
    q, k, v = module.project(x)  # (B, h, n, dh)
    logits = q @ k.transpose(-1, -2) / math.sqrt(module.head_dim)
    attn = logits.masked_fill(~(mask | empty), float("-inf")).softmax(-1)
    out = (attn @ v) * ~empty  # (B, h, n, dh)
    return module.to_out(out.transpose(1, 2).reshape(b, n, d))


CONFIGS = {  # (n, stride, summary); stride None = the default √n rule (8 at n = 128, 16 at 256)
    "sparse_strided": [(64, 8, None), (64, 4, None), (128, None, None)],
    "sparse_fixed": [(64, 8, 3), (64, 16, 16), (256, None, 4)],  # c = l: A² is every earlier key
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("combine,layer_index", COMBINES)
@pytest.mark.parametrize("name,n,l,c", [(v, *cfg) for v, cfgs in CONFIGS.items() for cfg in cfgs])
def test_matches_dense_reference(name, n, l, c, combine, layer_index, causal):
    options = {"stride": l} if l else {}
    if c:
        options["summary"] = c
    module = build(name, d_model=16, heads=2, layer_index=layer_index, causal=causal, combine=combine,
                   **options).double()
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, n, 16, dtype=torch.float64)
    inputs = [x, *module.parameters()]
    y = module(x)
    grads = torch.autograd.grad((y * g).sum(), inputs)
    y_ref = reference(module, x, name, l or default_stride(n), c or 8)
    grads_ref = torch.autograd.grad((y_ref * g).sum(), inputs)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


# --- 3. causal means no look-ahead (and bidirectional does look ahead) ------------------------
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("combine,layer_index", COMBINES[:4])
@pytest.mark.parametrize("name", VARIANTS)
def test_causal_never_looks_ahead(name, combine, layer_index, causal):
    extra = {"summary": 4} if name == "sparse_fixed" else {}
    module = build(name, layer_index=layer_index, causal=causal, combine=combine, stride=8, **extra).double()
    t = 37  # mid-block at stride 8, so both the block and the column reach past t
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    x2 = x.clone()
    x2[:, t + 1:] = torch.randn(1, 64 - t - 1, 32, dtype=torch.float64)
    with torch.no_grad():
        y, y2 = module(x), module(x2)
    assert torch.allclose(y[:, : t + 1], y2[:, : t + 1], rtol=0, atol=1e-12) is causal


@pytest.mark.parametrize("name", VARIANTS)
def test_causal_by_default_never_looks_ahead_as_the_dense_variants(name):
    """The check full, sdpa and talking_heads pass (helpers_dense.py), at the default options."""
    check_causal_never_looks_ahead(name)


# --- 4. bad options and shapes ----------------------------------------------------------------
def one_line_error(fn):
    with pytest.raises(VariantError) as info:
        fn()
    assert "\n" not in str(info.value)
    return str(info.value)


def test_bad_options_and_shapes_raise():
    fixed, strided = FixedSparseAttention, StridedSparseAttention
    # seq_len not a multiple of l: explicit stride, default stride (100 -> 8), and in forward
    assert "stride=4" in one_line_error(lambda: strided.check_shape(strided.resolve_options({}), 100, 4, 8))
    one_line_error(lambda: fixed.check_shape(fixed.resolve_options({"stride": "16"}), 40, 4, 8))
    one_line_error(lambda: build("sparse_strided", stride=16)(torch.randn(1, 40, 32)))
    # c > l
    too_wide = fixed.resolve_options({"stride": 8, "summary": 16})
    assert "summary" in one_line_error(lambda: fixed.check_shape(too_wide, 64, 4, 8))
    one_line_error(lambda: build("sparse_fixed", summary=16)(torch.randn(1, 64, 32)))  # default l = 8
    # odd heads for multihead
    one_line_error(lambda: strided.check_shape(strided.resolve_options({"combine": "multihead"}), 64, 3, 8))
    odd = build("sparse_fixed", d_model=24, heads=3, combine="multihead")
    one_line_error(lambda: odd(torch.randn(1, 64, 24)))
    # unknown combine, stride not a power of two, summary not positive or not on strided
    assert "merged" in one_line_error(lambda: parse_variant("sparse_fixed[combine=sum]"))
    one_line_error(lambda: build("sparse_strided", combine=2))
    one_line_error(lambda: build("sparse_strided", stride=12))
    one_line_error(lambda: build("sparse_fixed", summary=0))
    one_line_error(lambda: build("sparse_strided", summary=4))
    # what would work does not raise
    strided.check_shape(strided.resolve_options({"combine": "multihead"}), 64, 4, 8)
    fixed.check_shape(fixed.resolve_options({"stride": 8, "summary": 8}), 64, 4, 8)


def test_registered_and_parsed():
    assert get_variant("sparse_strided") is StridedSparseAttention
    assert get_variant("sparse_fixed") is FixedSparseAttention
    spec = parse_variant("sparse_fixed[combine= multihead , stride=16, summary=4]")
    assert spec.options == {"combine": "multihead", "stride": 16, "summary": 4}
    module = spec.build(32, 4, layer_index=1)
    assert (module.combine, module.stride, module.layer_index) == ("multihead", 16, 1)
    # the two share a base class; each keeps its own one-line text for `attnprof variants`
    descriptions = {cls.description for cls in VARIANTS.values()}
    assert len(descriptions) == 2 and all(d and "\n" not in d for d in descriptions)


# --- 5. and 6. fake mode at long n; memory order n·√n and no n x n tensor -----------------------
@pytest.mark.parametrize("combine", ["merged", "multihead", "interleaved"])
@pytest.mark.parametrize("name", VARIANTS)
def test_fake_mode_forward_backward_long(name, combine):
    n = 16384
    with FakeTensorMode():
        module = build(name, d_model=32, heads=2, layer_index=1, combine=combine)
        x = torch.randn(1, n, 32, requires_grad=True)
        y = module(x)
        y.sum().backward()
    assert y.shape == x.shape and x.grad.shape == x.shape
    assert all(p.grad is not None and p.grad.shape == p.shape for p in module.parameters())


def core_memory(name, n, combine, layer_index):
    heads = 2 if combine == "multihead" else 1  # B·h = 1 per part: a dense n x n would show
    with FakeTensorMode():
        module = build(name, d_model=16 * heads, heads=heads, layer_index=layer_index, combine=combine)
        q, k, v = (torch.randn(1, heads, n, 16, requires_grad=True) for _ in range(3))
        g = torch.randn(1, heads, n, 16)
        with MemoryTracker() as tracker:
            module.core(q, k, v).backward(g)
    return tracker.report()


@pytest.mark.parametrize("combine,layer_index", COMBINES[:4])
@pytest.mark.parametrize("name", VARIANTS)
def test_core_memory_is_n_sqrt_n(name, combine, layer_index):
    small, large = (core_memory(name, n, combine, layer_index) for n in (4096, 16384))
    slope = math.log(large.peak_bytes / small.peak_bytes) / math.log(16384 / 4096)
    assert abs(slope - VARIANTS[name].complexity[0]) <= 0.2, slope  # n·sqrt(n), as the variant declares
    for n, report in ((4096, small), (16384, large)):
        # No n x n matrix ever existed: the whole live set at the peak is below one fp32 n x n
        # matrix, and every storage, whenever it lived, is counted in that peak.
        assert report.peak_bytes < n * n * 4
        # the biggest storages at the peak are blocks or gathered keys, under n^2 / 4 elements
        assert report.largest_at_peak
        assert all(math.prod(e["shape"]) < n * n / 4 for e in report.largest_at_peak)


# --- 7. distinct summary sub-blocks per head (fixed, §4.2): their sets in test_sparse_patterns.py
def distinct_reference(module, x, l, c):
    """Dense masked attention with one (n, n) mask per head: A¹ ∪ A²_g (merged), A¹ on the
    first half and A²_g on the second (multihead, g counted within that half), or one set
    per layer (interleaved); g is the head's index among the heads attending A²."""
    b, n, d = x.shape
    h, combine, causal = module.heads, module.combine, module.causal

    def mask(sets):
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            m[i, sorted(sets(i))] = True
        return m

    a1 = mask(lambda i: fixed_sets(i, n, l, c, causal)[0])
    a2 = [mask(lambda i: fixed_sets(i, n, l, c, causal, group=g)[1]) for g in range(h)]
    if combine == "merged":
        per_head = [a1 | a2[g] for g in range(h)]
    elif combine == "multihead":
        per_head = [a1] * (h // 2) + a2[: h // 2]
    else:
        per_head = [a1] * h if module.layer_index % 2 == 0 else a2
    full_mask = torch.stack(per_head)  # (h, n, n)
    empty = ~full_mask.any(-1, keepdim=True)
    q, k, v = module.project(x)
    logits = q @ k.transpose(-1, -2) / math.sqrt(module.head_dim)
    out = logits.masked_fill(~(full_mask | empty), float("-inf")).softmax(-1) @ v * ~empty
    return module.to_out(out.transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("combine,layer_index", COMBINES[:4])
@pytest.mark.parametrize("heads,l,c", [(4, 8, 2), (4, 16, 4), (8, 8, 4)])  # (8, 8, 4): heads cycle after l/c = 2
def test_distinct_summaries_match_a_per_head_dense_reference(heads, l, c, combine, layer_index, causal):
    module = build("sparse_fixed", d_model=4 * heads, heads=heads, layer_index=layer_index, causal=causal,
                   combine=combine, stride=l, summary=c, distinct_summaries=True).double()
    x = torch.randn(2, 64, 4 * heads, dtype=torch.float64, requires_grad=True)
    g = torch.randn_like(x)
    inputs = [x, *module.parameters()]
    y, y_ref = module(x), distinct_reference(module, x, l, c)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(torch.autograd.grad((y * g).sum(), inputs), torch.autograd.grad((y_ref * g).sum(), inputs)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    if combine != "interleaved" or layer_index % 2:  # A² is in use: distinct heads really differ from shared ones
        shared = build("sparse_fixed", d_model=4 * heads, heads=heads, layer_index=layer_index, causal=causal,
                       combine=combine, stride=l, summary=c).double()
        shared.load_state_dict(module.state_dict())
        assert not torch.allclose(shared(x), y)


def test_distinct_summaries_run_under_fake_tensors_in_n_sqrt_n():
    def peak(n, distinct=True):
        with FakeTensorMode():
            module = build("sparse_fixed", d_model=64, heads=4, distinct_summaries=distinct)
            q, k, v = (torch.randn(1, 4, n, 16, requires_grad=True) for _ in range(3))
            with MemoryTracker() as tracker:
                module.core(q, k, v).backward(torch.randn(1, 4, n, 16))
        return tracker.report().peak_bytes

    small, large = peak(4096), peak(16384)
    assert abs(math.log(large / small) / math.log(4) - 1.5) <= 0.2
    assert large < 16384 * 16384 * 4 * 4  # below one fp32 n x n per head
    assert large <= 1.1 * peak(16384, distinct=False)  # per-head gathers and masks cost next to nothing
    assert parse_variant("sparse_fixed[distinct_summaries=true]").options == {"distinct_summaries": True}


# --- 8. cost formulas (the report's expected exponents) ------------------------------------------
@pytest.mark.parametrize("combine", ["merged", "multihead", "interleaved"])
@pytest.mark.parametrize("name", VARIANTS)
def test_cost_formulas_match_the_flop_count_and_the_tracked_peak(name, combine):
    from attnprof.profiler.measure.flops import FlopCounter

    cls = VARIANTS[name]
    options = cls.resolve_options({"combine": combine})
    peaks = {}
    for n in (4096, 16384):
        with FakeTensorMode():
            module = build(name, d_model=128, heads=4, combine=combine)
            q, k, v = (torch.randn(1, 4, n, 32, requires_grad=True) for _ in range(3))
            with FlopCounter() as counter, MemoryTracker() as tracker:
                module.core(q, k, v).backward(torch.randn(1, 4, n, 32))
        assert counter.total == pytest.approx(cls.cost_flops(options, n, 4, 32), rel=1e-9)
        peaks[n] = tracker.report().peak_bytes
        assert cls.cost_bytes(options, n, 4, 32) == pytest.approx(peaks[n], rel=0.15)
    slope = math.log(peaks[16384] / peaks[4096]) / math.log(4)
    formula = math.log(cls.cost_bytes(options, 16384, 4, 32) / cls.cost_bytes(options, 4096, 4, 32)) / math.log(4)
    assert formula == pytest.approx(slope, abs=0.1)
