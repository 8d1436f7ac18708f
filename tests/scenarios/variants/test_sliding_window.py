"""Sliding-window attention (Beltagy et al. 2020; Jiang et al. 2023): its window convention,
exactness against a dense banded reference (forward and gradients), that it is the Sparse
Transformer's A¹ band, option errors, and O(n·W) memory with no n x n tensor ever allocated."""

import math

import pytest
import torch

from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.tracker import ALLOC
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.variants.base import VariantError
from attnprof.scenarios.variants.registry import VariantSpec, get_variant, parse_variant
from attnprof.scenarios.variants.sliding_window import SlidingWindowAttention
from attnprof.scenarios.variants.sparse_patterns import sliding_window_set, strided_a1

from helpers_dense import check_bidirectional_option_looks_ahead, check_causal_never_looks_ahead


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def build(dtype, d_model=16, heads=2, **options):
    return VariantSpec("sliding_window", options).build(d_model, heads).to(dtype)


# --- 1. the convention: W keys ending at the query, itself included (HF's Mistral mask) --------
@pytest.mark.parametrize("w", [1, 2, 5, 16, 100])
def test_the_window_is_the_last_w_keys(w):
    n = 40
    for i in range(n):
        assert sliding_window_set(i, n, w) == set(range(max(0, i - w + 1), i + 1))
        assert sliding_window_set(i, n, w, causal=False) == set(range(max(0, i - w + 1), min(n, i + w)))
        for causal in (True, False):  # the Sparse Transformer's A¹ band with l = W − 1
            assert sliding_window_set(i, n, w, causal) == {j for j in range(n) if strided_a1(i, j, w - 1, causal)}
    assert len(sliding_window_set(n - 1, n, w)) == min(w, n)


def dense_reference(module, x):
    """softmax(QKᵀ/√dh + mask) V with a dense (n, n) band built here from tril/triu, not from
    the variant's predicate: keys i−W+1 … i (and … i+W−1 when bidirectional)."""
    b, n, d = x.shape
    w = module.window
    q, k, v = module.project(x)  # (B, h, n, dh)
    ones = torch.ones(n, n, dtype=torch.bool)
    band = ones.tril(0 if module.causal else w - 1) & ones.triu(-(w - 1))  # (n, n)
    logits = q @ k.transpose(-1, -2) / math.sqrt(module.head_dim)  # (B, h, n, n)
    out = logits.masked_fill(~band, float("-inf")).softmax(-1) @ v  # (B, h, n, dh)
    return module.to_out(out.transpose(1, 2).reshape(b, n, d))


TOLERANCE = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5)}


# (n, W, batch, heads): n a multiple of W, n not a multiple (padded), n < W, n = W, W < n < 2W,
# W = 1 (itself only)
SHAPES = [(64, 16, 2, 2), (70, 16, 1, 2), (50, 64, 2, 1), (32, 32, 1, 4), (40, 32, 2, 2), (37, 5, 3, 2),
          (24, 1, 1, 2), (96, 33, 2, 2)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n,w,batch,heads", SHAPES)
def test_forward_and_gradients_equal_a_dense_banded_reference(n, w, batch, heads, causal, dtype):
    module = build(dtype, d_model=8 * heads, heads=heads, window=w, causal=causal)
    x = torch.randn(batch, n, 8 * heads, dtype=dtype, requires_grad=True)
    g = torch.randn(batch, n, 8 * heads, dtype=dtype)  # a generic direction: every gradient entry matters
    inputs = [x, *module.parameters()]
    y, y_ref = module(x), dense_reference(module, x)
    torch.testing.assert_close(y, y_ref, **TOLERANCE[dtype])
    grads = torch.autograd.grad((y * g).sum(), inputs)
    grads_ref = torch.autograd.grad((y_ref * g).sum(), inputs)
    assert len(grads) == 3
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want, **TOLERANCE[dtype])


def test_a_window_as_long_as_the_sequence_is_full_causal_attention():
    n = 48
    window, full = build(torch.float64, window=n), VariantSpec("full").build(16, 2).double()
    full.load_state_dict(window.state_dict())
    x = torch.randn(2, n, 16, dtype=torch.float64)
    torch.testing.assert_close(window(x), full(x), rtol=1e-10, atol=1e-12)
    narrower = build(torch.float64, window=n - 1)
    narrower.load_state_dict(window.state_dict())
    assert not torch.allclose(narrower(x), full(x))  # the window really cuts


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("l", [4, 8])
def test_it_is_the_strided_a1_band_with_l_equal_w_minus_1(l, causal):
    """Sparse Transformer A¹ = {max(0, i−l) … i}: interleaved strided at an even layer runs A¹ alone."""
    window = build(torch.float64, window=l + 1, causal=causal)
    strided = VariantSpec("sparse_strided", {"stride": l, "combine": "interleaved", "causal": causal}).build(16, 2)
    strided = strided.double()
    strided.load_state_dict(window.state_dict())
    x = torch.randn(2, 64, 16, dtype=torch.float64)
    torch.testing.assert_close(window(x), strided(x), rtol=1e-10, atol=1e-12)


def test_causal_never_looks_ahead_and_bidirectional_does():
    check_causal_never_looks_ahead("sliding_window")  # the check full, sdpa and the sparse ones pass
    check_bidirectional_option_looks_ahead("sliding_window")
    module = build(torch.float64, window=8)
    x = torch.randn(1, 64, 16, dtype=torch.float64)
    far = x.clone()
    far[:, :40] = torch.randn(1, 40, 16, dtype=torch.float64)  # more than W − 1 = 7 back from query 48
    with torch.no_grad():
        torch.testing.assert_close(module(x)[:, 47:], module(far)[:, 47:], rtol=0, atol=0)
        assert not torch.allclose(module(x)[:, 46], module(far)[:, 46])  # query 46 sees key 39


# --- 2. options -------------------------------------------------------------------------------
def one_line_error(fn):
    with pytest.raises(VariantError) as info:
        fn()
    assert "\n" not in str(info.value)
    return str(info.value)


def test_options_parse_and_bad_ones_are_one_line():
    assert get_variant("sliding_window") is SlidingWindowAttention
    spec = parse_variant("sliding_window[window= 64 ,causal=false]")
    assert spec.options == {"window": 64, "causal": False} and spec.label == "sliding_window[window=64,causal=false]"
    module = spec.build(32, 4)
    assert (module.window, module.causal) == (64, False)
    assert SlidingWindowAttention.resolve_options({})["window"] == 256  # the documented default
    assert "positive" in one_line_error(lambda: parse_variant("sliding_window[window=0]"))
    one_line_error(lambda: parse_variant("sliding_window[window=-3]"))
    one_line_error(lambda: parse_variant("sliding_window[window=1.5]"))
    one_line_error(lambda: parse_variant("sliding_window[stride=4]"))
    paper = SlidingWindowAttention.paper
    assert "arXiv 2004.05150" in paper and "arXiv 2310.06825" in paper


# --- 3. memory: linear in n at fixed W, no n x n tensor -------------------------------------------
def attention_point(label, n, batch=1, heads=2, d_model=32):
    return Point(label, "none", "attention", Shape(batch=batch, seq_len=n, d_model=d_model, heads=heads))


def test_predicted_peak_is_linear_in_n_at_a_fixed_window_and_far_below_full():
    label = "sliding_window[window=64]"
    small, large = (predict(attention_point(label, n), count_flops=False).peak_bytes for n in (2048, 4096))
    assert 1.9 <= large / small <= 2.1, large / small
    full = predict(attention_point("full", 4096), count_flops=False).peak_bytes
    assert large * 20 < full, (large, full)
    assert SlidingWindowAttention.complexity[0] == 1.0


def test_a_window_covering_the_sequence_costs_what_full_attention_does():
    """n ≤ W: one block of n and no neighbour block of padding, so no more than full's n x n."""
    for n in (256, 512):
        window, full = (predict(attention_point(label, n), count_flops=False).peak_bytes
                        for label in ("sliding_window[window=512]", "full"))
        assert window == full, (n, window, full)
    # at n = 2W the band (n x 2W scores) is as big as full's n x n; beyond, it is smaller
    assert predict(attention_point("sliding_window[window=512]", 2048), count_flops=False).peak_bytes < \
        predict(attention_point("full", 2048), count_flops=False).peak_bytes * 0.6


@pytest.mark.parametrize("w,causal", [(64, True), (48, False)])
def test_no_storage_of_n_by_n_elements_is_ever_allocated(w, causal):
    n = 4096
    label = f"sliding_window[window={w},causal={str(causal).lower()}]"
    traced = trace_point(attention_point(label, n, heads=1, d_model=16), count_flops=False)
    sizes = [event[2] for event in traced.trace if event[0] == ALLOC]
    assert len(sizes) > 20  # the trace did see the run
    # every storage, whenever it lived, is below n·n bytes (a bool n x n mask would be that);
    # the largest is the scores: n padded to a multiple of W, times 2W (3W bidirectional) keys, fp32
    scores_bytes = -(-n // w) * w * (2 if causal else 3) * w * 4
    assert max(sizes) < n * n and max(sizes) == scores_bytes
    assert all(math.prod(shape) < n * n / 8 for _, shape, _ in traced.origins.values())
    assert traced.peak_bytes < n * n  # the whole live set at the peak, too


def test_cost_flops_is_the_flop_count_of_the_core():
    from attnprof.profiler.measure.flops import FlopCounter

    for options, n in (({"window": 64}, 1000), ({"window": 64, "causal": False}, 1024), ({}, 100)):
        resolved = SlidingWindowAttention.resolve_options(options)
        module = SlidingWindowAttention(64, 2, **options)
        q, k, v = (torch.randn(1, 2, n, 32, requires_grad=True) for _ in range(3))
        with FlopCounter() as counter:
            module.core(q, k, v).backward(torch.randn(1, 2, n, 32))
        assert counter.total == pytest.approx(SlidingWindowAttention.cost_flops(resolved, n, 2, 32), rel=1e-9)


# --- 4. the GPU models read its ops: `predict --gpu` works ----------------------------------------
def test_predict_on_a_named_gpu_models_its_memory_and_time():
    from typer.testing import CliRunner

    from attnprof.cli import app

    result = CliRunner().invoke(app, ["predict", "--gpu", "h100-sxm", "-v", "sliding_window[window=64]",
                                      "--seq-len", "256", "--d-model", "32", "--heads", "2", "--layers", "1",
                                      "--mode", "plain"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("sliding_window[window=64]")]
    assert len(rows) == 2 and "h100-sxm" in rows[1] and "yes" in rows[1].split()  # CPU table, then the GPU model
    refused = CliRunner().invoke(app, ["predict", "-v", "sliding_window[window=0]", "--seq-len", "256"])
    assert refused.exit_code == 2 and "positive" in refused.output and "Traceback" not in refused.output


def test_cost_bytes_follows_the_tracked_peak_and_gives_the_report_its_exponents():
    from attnprof.reports.scaling import expected_exponents

    for options, n in (({"window": 128}, 4096), ({"window": 128, "causal": False}, 1000), ({}, 200)):
        label = "sliding_window[" + ",".join(f"{k}={str(v).lower()}" for k, v in options.items()) + "]"
        peak = predict(attention_point(label.replace("[]", ""), n, heads=4, d_model=128), count_flops=False).peak_bytes
        resolved = SlidingWindowAttention.resolve_options(options)
        assert SlidingWindowAttention.cost_bytes(resolved, n, 4, 32) == pytest.approx(peak, rel=0.15), (label, n)
    memory, time = expected_exponents("sliding_window[window=64]", [4096, 16384])
    assert memory == pytest.approx(1.0, abs=0.01) and time == pytest.approx(1.0, abs=0.01)
    label = "sliding_window[window=1024]"
    short = expected_exponents(label, [512, 1024])  # n <= W: one block, n x n scores
    assert short[1] == pytest.approx(2.0, abs=0.01)
    tracked = [predict(attention_point(label, n, heads=4, d_model=256), count_flops=False).peak_bytes
               for n in (512, 1024)]  # the report's default shape: 4 heads of 64
    slope = math.log(tracked[1] / tracked[0]) / math.log(2)
    assert short[0] == pytest.approx(slope, abs=0.1) and short[0] > 1.2, (short, slope)
