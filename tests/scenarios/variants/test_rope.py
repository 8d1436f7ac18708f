"""RoPE (scenarios/variants/rope.py; Su et al. 2021): the rotation equals the pair-by-pair
reference written in helpers_dense.py, forward and gradients; scores depend on relative
positions only; every dense variant with --rope equals the dense reference with RoPE (also
with grouped KV heads); LSH rotates its shared QK once; an odd head_dim is refused."""

import pytest
import torch

from attnprof.scenarios.variants.base import VariantError
from attnprof.scenarios.variants.registry import VariantSpec
from attnprof.scenarios.variants.rope import rotate_half, rotate_qk, rotary_tables
from helpers_dense import build, dense_reference, rotary_reference


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def test_the_rotation_equals_the_pair_by_pair_reference_forward_and_gradients():
    q = torch.randn(2, 4, 16, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 16, 8, dtype=torch.float64, requires_grad=True)
    rq, rk = rotate_qk(q, k)
    ref_q, ref_k = rotary_reference(q), rotary_reference(k)
    torch.testing.assert_close(rq, ref_q, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rk, ref_k, rtol=1e-12, atol=1e-12)
    cq, ck = torch.randn_like(rq), torch.randn_like(rk)
    got = torch.autograd.grad((rq * cq).sum() + (rk * ck).sum(), [q, k])
    want = torch.autograd.grad((ref_q * cq).sum() + (ref_k * ck).sum(), [q, k])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_position_zero_is_untouched_and_norms_are_kept():
    x = torch.randn(1, 1, 10, 6, dtype=torch.float64)
    rx, _ = rotate_qk(x, x)
    torch.testing.assert_close(rx[..., 0, :], x[..., 0, :])
    torch.testing.assert_close(rx.norm(dim=-1), x.norm(dim=-1))


def test_scores_depend_on_the_relative_position_only():
    """Su et al. §3.4: <R_m q, R_n k> = <q, R_(n-m) k>: the same q, k at m, n and m + s, n + s."""
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    x = torch.zeros(1, 1, 12, 8, dtype=torch.float64)
    x[0, 0, 2], x[0, 0, 5], x[0, 0, 7], x[0, 0, 10] = q, k, q, k
    r, _ = rotate_qk(x, x)
    torch.testing.assert_close(r[0, 0, 2] @ r[0, 0, 5], r[0, 0, 7] @ r[0, 0, 10], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(r[0, 0, 2] @ r[0, 0, 5], q @ k)  # and it did rotate


def test_the_tables_and_rotate_half():
    cos, sin = rotary_tables(5, 4, torch.float32, "cpu")
    assert cos.shape == sin.shape == (5, 4) and cos.dtype == torch.float32
    torch.testing.assert_close(cos[:, :2], cos[:, 2:])  # channel i and i + dh/2 share an angle
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))
    bf_cos, _ = rotary_tables(5, 4, torch.bfloat16, "cpu")
    assert bf_cos.dtype == torch.bfloat16  # built in fp32, cast (as Llama code)


@pytest.mark.parametrize("kv_heads", [0, 2])
@pytest.mark.parametrize("name", ["full", "sdpa", "talking_heads"])
def test_dense_variants_with_rope_equal_the_dense_reference_with_rope(name, kv_heads):
    module = build(name, 32, 4, kv_heads=kv_heads, rope=True)
    x = torch.randn(2, 32, 32, dtype=torch.float64, requires_grad=True)
    mix = (module.pre_mix, module.post_mix) if name == "talking_heads" else None
    out, ref = module(x), dense_reference(module, x, True, mix, rope=True, kv_heads=kv_heads)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(out, dense_reference(module, x, True, mix, kv_heads=kv_heads))  # rope mattered
    params = [x, *module.parameters()]
    cotangent = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad((out * cotangent).sum(), params),
                    torch.autograd.grad((ref * cotangent).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_lsh_rotates_its_shared_qk_once_and_keeps_it_shared():
    module = VariantSpec("lsh", {"bucket_size": 8}).build(32, 4, rope=True)
    seen = []
    module.core = lambda q, k, v: (seen.append((q, k)), q)[1]  # what the core is handed
    qk, v = torch.randn(1, 4, 32, 8), torch.randn(1, 4, 32, 8)
    module.attend(qk, qk, v)
    q, k = seen[0]
    assert q is k  # still one tensor: the shared QK
    torch.testing.assert_close(q, rotary_reference(qk))


def test_lsh_with_rope_runs_forward_and_backward():
    module = VariantSpec("lsh", {"bucket_size": 8}).build(32, 4, rope=True)
    x = torch.randn(1, 32, 32, requires_grad=True)
    module(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_an_odd_head_dim_is_refused_in_one_line():
    with pytest.raises(VariantError) as exc:
        VariantSpec("full").build(12, 4, rope=True)  # head_dim 3
    assert "head_dim 3 must be even" in str(exc.value) and "\n" not in str(exc.value)
