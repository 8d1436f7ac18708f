"""Tests of Reformer LSH attention (attnprof.scenarios.variants.lsh): tiny CPU shapes,
fixed seeds, float64 wherever numbers are compared."""

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure.tracker import MemoryReport, MemoryTracker
from attnprof.scenarios.variants.base import Attention, VariantError
from attnprof.scenarios.variants.lsh import LSHAttention
from attnprof.scenarios.variants.registry import get_variant, parse_variant


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def make(d_model=16, heads=2, dtype=torch.float64, **options) -> LSHAttention:
    return LSHAttention(d_model, heads, **options).to(dtype)


def dense_reference(m: LSHAttention, x: torch.Tensor) -> torch.Tensor:
    """Full shared-QK attention written out densely with the module's own weights:
    keys = normalised qk, scale 1/sqrt(dh), causal mask, own key at -1e5 (Reformer §2)."""
    b, n, d = x.shape
    heads, dh = m.heads, d // m.heads
    qk, v = (x @ m.to_in.weight.T).chunk(2, dim=-1)
    qk, v = (t.reshape(b, n, heads, dh).transpose(1, 2) for t in (qk, v))
    keys = qk / qk.norm(dim=-1, keepdim=True)
    logits = qk @ keys.transpose(-1, -2) / math.sqrt(dh)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    if m.causal:
        logits = logits.masked_fill(j > i, torch.finfo(logits.dtype).min)
    logits = logits.masked_fill(i == j, -1e5)
    out = (logits.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d)
    return out @ m.to_out.weight.T


def forward_and_grads(m, x, fn, upstream):
    x = x.clone().requires_grad_(True)
    m.zero_grad()
    y = fn(x)
    (y * upstream).sum().backward()
    return y.detach(), x.grad, [p.grad.clone() for p in m.parameters()]


@pytest.mark.parametrize("causal", [True, False])
def test_two_buckets_one_round_equals_full_attention(causal):
    # n = 2*bucket_size, one round: two chunks, each sees itself and the other one
    # (chunk 0 wraps back to chunk 1), so every query sees every key exactly once.
    m = make(causal=causal, n_hashes=1, bucket_size=8)
    x = torch.randn(2, 16, 16, dtype=torch.float64)
    upstream = torch.randn(2, 16, 16, dtype=torch.float64)
    got = forward_and_grads(m, x, m, upstream)
    want = forward_and_grads(m, x, lambda t: dense_reference(m, t), upstream)
    torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-12)
    assert len(got[2]) == 2  # to_in and to_out
    for g, w in zip(got[2], want[2]):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_rounds_combine_as_one_softmax_over_every_key_seen(causal):
    # n = 2c, two rounds with opposite rotations: round 0 sorts group P (x.r > 0) then Q,
    # round 1 sorts Q then P. Chunks: P|Q|Q|P. A query in P sees P+P (chunk 0 wraps to
    # chunk 3) then P+Q; one in Q sees Q+P then Q+Q. Rounds weighted by their softmax mass
    # equal one softmax over that multiset: own group 3 times, the other group once.
    m = make(n_hashes=2, bucket_size=4, causal=causal)
    r = torch.randn(8, dtype=torch.float64)
    qk = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    in_p = torch.tensor([1, 0, 1, 0, 0, 1, 1, 0], dtype=torch.bool)
    qk = qk * torch.where(in_p[:, None] == (qk @ r > 0)[..., None], 1.0, -1.0)  # rows flipped into P / Q
    v = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    m.rotations = torch.stack([r, -r], dim=1).unsqueeze(-1)  # (dh, r=2, nb/2=1)
    with m.replay_hashes():
        got = m.core(qk, qk, v)
    logits = qk @ (qk / qk.norm(dim=-1, keepdim=True)).transpose(-1, -2) / math.sqrt(8)
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    if causal:
        logits = logits.masked_fill(j > i, torch.finfo(logits.dtype).min)
    logits = logits.masked_fill(i == j, -1e5)
    seen = (in_p[:, None] == in_p[None, :]).double() * 2 + 1  # (n, n) multiplicities: 3 or 1
    want = (logits + seen.log()).softmax(dim=-1) @ v
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_causal_every_attended_pair_is_in_the_past():
    # Exact Jacobian check: y[:, :t+1] does not depend on x[:, t+1:] through any weight.
    # (A *finite* change of x[:, t+1:] may still change y[:, :t+1]: future tokens move
    # bucket and chunk boundaries, so a past query may see other *past* keys. That is
    # Reformer's design, so the finite-change check below perturbs values only.)
    m = make(d_model=32, heads=2, n_hashes=4, bucket_size=16)
    x = torch.randn(2, 256, 32, dtype=torch.float64, requires_grad=True)
    y = m(x)
    for t in (0, 37, 128, 254):
        (grad,) = torch.autograd.grad(y[:, : t + 1].sum(), x, retain_graph=True)
        assert torch.all(grad[:, t + 1 :] == 0), t
        assert grad[:, : t + 1].abs().sum() > 0


@pytest.mark.parametrize("causal", [True, False])
def test_future_values_reach_the_past_only_when_bidirectional(causal):
    m = make(d_model=32, heads=2, n_hashes=4, bucket_size=16, causal=causal)
    qk, v = torch.randn(2, 1, 2, 256, 16, dtype=torch.float64).unbind(0)
    t = 100
    v2 = v.clone()
    v2[:, :, t + 1 :] += 1.0
    y = m.core(qk, qk, v)
    with m.replay_hashes():  # the same buckets for both calls
        y2 = m.core(qk, qk, v2)
    same = torch.equal(y[:, :, : t + 1], y2[:, :, : t + 1])
    assert same == causal
    assert not torch.equal(y[:, :, t + 1 :], y2[:, :, t + 1 :])


def test_bidirectional_gradient_reaches_the_future():
    m = make(d_model=32, heads=2, n_hashes=4, bucket_size=16, causal=False)
    x = torch.randn(1, 256, 32, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(m(x)[:, :50].sum(), x)
    assert grad[:, 50:].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_first_causal_token_attends_to_itself(dtype):
    # Position 0 has no key but its own: the finite self-mask value must let it through.
    m = make(n_hashes=2, bucket_size=4, dtype=dtype)
    qk, v = torch.randn(2, 2, 2, 32, 8, dtype=dtype).unbind(0)
    out = m.core(qk, qk, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])


@pytest.mark.parametrize("causal", [True, False])
def test_gradcheck_with_fixed_hashes(causal):
    m = make(heads=2, n_hashes=2, bucket_size=2, causal=causal)
    qk = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    m.core(qk, qk, v)  # draws the rotations that the replay below reuses
    with m.replay_hashes():
        assert torch.autograd.gradcheck(lambda a, b: m.core(a, a, b), (qk, v))


def test_replay_hashes_reuses_rotations():
    m = make(d_model=32, heads=2, n_hashes=2, bucket_size=8)
    x = torch.randn(2, 64, 32, dtype=torch.float64)
    y = m(x)
    rng = torch.get_rng_state()
    with m.replay_hashes():
        assert torch.equal(m(x), y)
        assert torch.equal(m(x), y)
    assert torch.equal(torch.get_rng_state(), rng)  # replay never draws
    assert not torch.equal(m(x), y)  # outside the block: fresh rotations
    # The stack's other route: replaying the global RNG state hashes identically too.
    state = torch.get_rng_state()
    y1 = m(x)
    torch.set_rng_state(state)
    assert torch.equal(m(x), y1)


def test_shape_and_option_errors():
    options = LSHAttention.resolve_options({"bucket_size": 16})
    LSHAttention.check_shape(options, 64, 2, 16)  # 2 buckets: fine
    with pytest.raises(VariantError, match=r"seq_len=64 or bucket_size=12") as err:
        LSHAttention.check_shape(options, 48, 2, 16)
    assert "\n" not in str(err.value)
    with pytest.raises(VariantError, match="2\\*bucket_size=32"):
        make(bucket_size=16).core(*torch.randn(3, 1, 2, 48, 8, dtype=torch.float64))
    for bad in ({"bucket_size": 0}, {"n_hashes": "x"}, {"n_hashes": 1.5}, {"n_hashes": -2}, {"hashes": 2}):
        with pytest.raises(VariantError):
            LSHAttention.resolve_options(bad)
    with pytest.raises(VariantError):
        LSHAttention(16, 2, bucket_size=0)
    with pytest.raises(VariantError):
        parse_variant("lsh[n_hashes=x]")
    assert parse_variant("lsh[n_hashes=8]").options == {"n_hashes": 8}


def test_registered_with_shared_qk_projection():
    assert get_variant("lsh") is LSHAttention
    assert issubclass(LSHAttention, Attention) and LSHAttention.paper and LSHAttention.description
    # shared QK: one projection makes queries-as-keys and values (2 x d_model), not three
    m = make(d_model=16)
    assert m.to_in.out_features == 2 * 16
    q, k, v = m.project(torch.randn(1, 8, 16, dtype=torch.float64))
    assert k is q and v.shape == q.shape == (1, 2, 8, 8)


def test_fake_mode_forward_backward_at_8192():
    with FakeTensorMode():
        m = LSHAttention(64, 4)
        x = torch.randn(1, 8192, 64, requires_grad=True)
        y = m(x)
        y.sum().backward()
        assert y.shape == (1, 8192, 64)
        assert x.grad.shape == x.shape
        assert all(p.grad is not None and p.grad.shape == p.shape for p in m.parameters())


def core_fwd_bwd_memory(n: int) -> MemoryReport:
    """The project's exact tracker over LSH's core, forward and backward, under fake tensors."""
    with FakeTensorMode():
        m = LSHAttention(64, 2, n_hashes=2, bucket_size=64)
        qk = torch.randn(1, 2, n, 32, requires_grad=True)
        v = torch.randn(1, 2, n, 32, requires_grad=True)
        with MemoryTracker() as tracker:
            m.core(qk, qk, v).sum().backward()
    return tracker.report()


def elements(entry: dict) -> int:
    return math.prod(entry["shape"])


def test_memory_is_linear_in_n():
    small, large = core_fwd_bwd_memory(16384), core_fwd_bwd_memory(32768)
    slope = math.log(large.peak_bytes / small.peak_bytes) / math.log(2)
    assert small.peak_bytes > 16384 * 2 * 2 * 128 * 4  # at least the scores (B h r n 2c, fp32)
    assert abs(slope - LSHAttention.complexity[0]) < 0.2, slope  # the memory order the variant declares
    for n, report in ((16384, small), (32768, large)):
        # No n x n matrix ever existed: every byte live at the peak together is less than one
        # fp32 n x n matrix, and any storage, live at any moment, counts in that peak.
        assert report.peak_bytes < n * n * 4
        # and the biggest storages at the peak are chunked scores, far below n^2 / 8 elements
        assert report.largest_at_peak and all(elements(e) < n * n / 8 for e in report.largest_at_peak)
