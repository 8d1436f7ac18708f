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


def _two_rounds_p_q(causal, **options):
    """n = 2c keys in groups P and Q, two rounds with opposite rotations (see
    test_rounds_combine_as_one_softmax_over_every_key_seen): the module's output, the dense
    logits (causal mask, self-attention -1e5), the P membership and the values."""
    m = make(n_hashes=2, bucket_size=4, causal=causal, **options)
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
    return got, logits, in_p, v


@pytest.mark.parametrize("causal", [True, False])
def test_rounds_combine_as_one_softmax_over_every_key_seen(causal):
    # n = 2c, two rounds with opposite rotations: round 0 sorts group P (x.r > 0) then Q,
    # round 1 sorts Q then P. Chunks: P|Q|Q|P. A query in P sees P+P (chunk 0 wraps to
    # chunk 3) then P+Q; one in Q sees Q+P then Q+Q. Rounds weighted by their softmax mass
    # equal one softmax over that multiset: own group 3 times, the other group once.
    got, logits, in_p, v = _two_rounds_p_q(causal)
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


# --- the paper-exact options: bucket_mask, dedup, lookback, buckets_per_chunk --------------------
PAPER = dict(bucket_mask=True, dedup=True, lookback="within_round")


def loop_reference(qk, v, rotations, c, causal, bucket_mask=False, dedup=False, lookback="across",
                   buckets_per_chunk=1):
    """The algorithm spelled out with python loops, float64: per round, the argmax hash,
    the sort by (bucket, position), chunks of c slots; each query copy's window is its chunk
    plus the one before (over all rounds' chunks with wrap for "across"; none out of a
    round's first chunk for "within_round"), keeping keys in the past (causal) and of the
    same round and bucket (bucket_mask). The query then takes one softmax over every key
    its windows held: a multiset (each copy counts), or a set with dedup (Appendix A).
    Keys are the normalised qk, scaled by 1/sqrt(dh); the own key gets -1e5 (Reformer §2)."""
    b, h, n, dh = qk.shape
    r = rotations.shape[1]
    per_round = n // c
    total = r * per_round
    out = torch.zeros_like(v)
    for bi in range(b):
        for hi in range(h):
            x = qk[bi, hi]
            rotated = torch.einsum("nd,drk->rnk", x, rotations)
            buckets = torch.cat([rotated, -rotated], dim=-1).argmax(-1).tolist()  # [round][position]
            slots = []  # sorted slots of all rounds: (round, position)
            for t in range(r):
                slots += [(t, i) for i in sorted(range(n), key=lambda i: (buckets[t][i], i))]
            seen = [[] for _ in range(n)]
            for s, (t, i) in enumerate(slots):
                chunk = s // c
                window = [chunk]
                if lookback == "across":
                    window.append((chunk - 1) % total)
                elif chunk % per_round:
                    window.append(chunk - 1)
                for w in window:
                    for (u, j) in slots[w * c:(w + 1) * c]:
                        if causal and j > i:
                            continue
                        if bucket_mask and (u, buckets[u][j]) != (t, buckets[t][i]):
                            continue
                        seen[i].append(j)
            for i in range(n):
                keys = sorted(set(seen[i])) if dedup else seen[i]
                logits = torch.stack([x[i] @ (x[j] / x[j].norm()) / math.sqrt(dh) if j != i
                                      else torch.tensor(-1e5, dtype=x.dtype) for j in keys])
                out[bi, hi, i] = logits.softmax(0) @ v[bi, hi, keys]
    return out


def core_with_rotations(m, qk, v):
    """m.core with rotations drawn once and then reused (they are also returned)."""
    m.core(qk, qk, v)
    with m.replay_hashes():
        return m.core(qk, qk, v), m.rotations


OPTION_SETS = [dict(), dict(bucket_mask=True), dict(dedup=True), dict(lookback="within_round"),
               dict(bucket_mask=True, dedup=True), dict(dedup=True, lookback="within_round"), PAPER,
               dict(PAPER, buckets_per_chunk=2), dict(buckets_per_chunk=2)]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_hashes,c", [(1, 4), (2, 4), (3, 2)])
def test_options_equal_the_loop_reference(options, causal, n_hashes, c):
    m = make(d_model=8, heads=2, n_hashes=n_hashes, bucket_size=c, causal=causal, **options)
    qk, v = torch.randn(2, 1, 2, 16, 4, dtype=torch.float64).unbind(0)
    got, rotations = core_with_rotations(m, qk, v)
    want = loop_reference(qk, v, rotations, c, causal, **options)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_one_round_bucket_mask_is_the_papers_dense_bucket_attention(causal):
    # n = 2c, one round, look-back across (chunk 0 wraps to chunk 1): each query's window is
    # every key, so bucket_mask leaves exactly P_i = {j : h(q_i) = h(k_j)} (Reformer Eq. 2-3).
    m = make(n_hashes=1, bucket_size=8, causal=causal, bucket_mask=True)
    qk, v = torch.randn(2, 1, 2, 16, 8, dtype=torch.float64).unbind(0)
    got, rotations = core_with_rotations(m, qk, v)
    rotated = qk @ rotations[:, 0]
    h = torch.cat([rotated, -rotated], dim=-1).argmax(-1)  # (1, 2, n)
    logits = qk @ (qk / qk.norm(dim=-1, keepdim=True)).transpose(-1, -2) / math.sqrt(8)
    i, j = torch.arange(16)[:, None], torch.arange(16)[None, :]
    hidden = h[..., :, None] != h[..., None, :]
    if causal:
        hidden = hidden | (j > i)
    logits = logits.masked_fill(hidden, torch.finfo(logits.dtype).min).masked_fill(i == j, -1e5)
    torch.testing.assert_close(got, logits.softmax(-1) @ v, rtol=1e-10, atol=1e-12)
    assert h.unique().numel() > 1  # more than one bucket: the mask did something


@pytest.mark.parametrize("causal", [True, False])
def test_dedup_turns_the_two_round_multiset_into_dense_attention(causal):
    # The construction of test_rounds_combine_as_one_softmax_over_every_key_seen: without
    # dedup the own group counts 3 times and the other once; with it every key counts once,
    # which over n = 2c keys is plain dense attention.
    got, logits, _, v = _two_rounds_p_q(causal, dedup=True)
    torch.testing.assert_close(got, logits.softmax(dim=-1) @ v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("options", [PAPER, dict(dedup=True), dict(bucket_mask=True, buckets_per_chunk=2)])
def test_paper_options_keep_causality_and_gradients(options):
    m = make(d_model=32, heads=2, n_hashes=3, bucket_size=16, **options)
    x = torch.randn(1, 256, 32, dtype=torch.float64, requires_grad=True)
    y = m(x)
    for t in (0, 77, 200):
        (grad,) = torch.autograd.grad(y[:, : t + 1].sum(), x, retain_graph=True)
        assert torch.all(grad[:, t + 1:] == 0), t
    small = make(heads=2, n_hashes=2, bucket_size=2, **options)
    qk = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    small.core(qk, qk, v)
    with small.replay_hashes():
        assert torch.autograd.gradcheck(lambda a, b: small.core(a, a, b), (qk, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paper_options_first_causal_token_attends_to_itself(dtype):
    m = make(n_hashes=2, bucket_size=4, dtype=dtype, **PAPER)
    qk, v = torch.randn(2, 2, 2, 32, 8, dtype=dtype).unbind(0)
    out = m.core(qk, qk, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])


def test_option_errors_and_labels():
    for bad in ({"lookback": "sideways"}, {"dedup": "maybe"}, {"buckets_per_chunk": 0}):
        with pytest.raises(VariantError):
            LSHAttention.resolve_options(bad)
    spec = parse_variant("lsh[n_hashes=4,bucket_mask=true,dedup=true,lookback=within_round]")
    assert spec.options == {"n_hashes": 4, "bucket_mask": True, "dedup": True, "lookback": "within_round"}
    defaults = LSHAttention.resolve_options({})
    assert (defaults["bucket_mask"], defaults["dedup"], defaults["lookback"], defaults["buckets_per_chunk"]) == \
        (False, False, "across", 1)  # reformer-pytorch's behaviour stays the default
    # two buckets per chunk: n_buckets = 2n/c is even for any multiple of c
    options = LSHAttention.resolve_options({"bucket_size": 16, "buckets_per_chunk": 2})
    LSHAttention.check_shape(options, 48, 2, 16)
    with pytest.raises(VariantError, match="bucket_size=16"):
        LSHAttention.check_shape(options, 40, 2, 16)


@pytest.mark.parametrize("options", [PAPER, dict(PAPER, buckets_per_chunk=2, n_hashes=4)])
def test_paper_options_run_under_fake_tensors_without_an_n_by_n_tensor(options):
    n = 16384
    with FakeTensorMode():
        m = LSHAttention(64, 2, bucket_size=64, **options)
        qk = torch.randn(1, 2, n, 32, requires_grad=True)
        v = torch.randn(1, 2, n, 32, requires_grad=True)
        with MemoryTracker() as tracker:
            m.core(qk, qk, v).sum().backward()
    report = tracker.report()
    assert report.peak_bytes < n * n * 4
    assert report.largest_at_peak and all(elements(e) < n * n / 8 for e in report.largest_at_peak)


def test_cost_flops_is_the_flop_count_of_the_core():
    from attnprof.profiler.measure.flops import FlopCounter

    for options in ({}, dict(PAPER, n_hashes=4), {"buckets_per_chunk": 2, "bucket_size": 32}):
        resolved = LSHAttention.resolve_options(options)
        with FakeTensorMode():
            m = LSHAttention(256, 4, **options)
            qk = torch.randn(1, 4, 4096, 64, requires_grad=True)
            v = torch.randn(1, 4, 4096, 64, requires_grad=True)
            with FlopCounter() as counter:
                m.core(qk, qk, v).sum().backward()
        assert counter.total == pytest.approx(LSHAttention.cost_flops(resolved, 4096, 4, 64), rel=1e-9), options
