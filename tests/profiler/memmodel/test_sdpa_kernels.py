"""What the GPU allocates differently: SDPA kernel substitution, cuBLAS workspaces in the trace
(their sizes: test_blas_workspaces.py; the backend choice: test_sdpa_choice.py)."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.memmodel.gpu_peak import replay
from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.caching_allocator import CachingAllocator
from attnprof.profiler.memmodel.sdpa_choice import BACKEND_ENV
from attnprof.profiler.memmodel.sdpa_kernels import ALIAS, ALLOC, FREE, OP, TIE, flash_num_splits, substitute
from attnprof.profiler.measure.tracker import MemoryTracker


@pytest.fixture(autouse=True)
def default_backend_choice(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    monkeypatch.delenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", raising=False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)


def test_flash_split_kv_heuristic():
    # B*H*ceil(n/64) = 1*4*16 = 64 blocks < 0.8 * 2 * 132 SMs; ceil(1024/256) = 4 key blocks:
    # efficiencies 0.24, 0.48, (3 not eligible), 0.97 -> 4 splits
    assert flash_num_splits(1, 4, 1024, 1024, 64, 132) == 4
    assert flash_num_splits(8, 16, 4096, 4096, 64, 132) == 1  # enough blocks to fill the GPU
    assert flash_num_splits(1, 2, 256, 256, 64, 108) == 1  # one key block: nothing to split


def _attention_trace(dtype=torch.bfloat16, b=1, h=2, n=256, d=64):
    """q, k, v leaves [B, H, n, d] and a real upstream gradient, as the attention scope runs them."""
    with FakeTensorMode():
        q, k, v = (torch.randn(b, h, n, d, dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(b, h, n, d, dtype=dtype)
        with MemoryTracker(trace=True) as t:
            t.track([q, k, v, dout], "inputs")
            out = F.scaled_dot_product_attention(q, k, v)
            t.mark("backward")
            out.backward(dout)
            del out
    return t


def _gpu_op_allocs(events, op):
    return [e for e in events if e[0] == ALLOC and e[3] == op]


def test_flash_substitution_by_hand():
    """B=1, H=2, n=256, d=64, bf16 on an A100 (flash_api.cpp mha_fwd / mha_bwd)."""
    t = _attention_trace()
    sub = substitute(t.trace, get_gpu("a100-80gb"), "flash")
    assert sub.substituted == 2
    fwd = _gpu_op_allocs(sub.events, "_scaled_dot_product_flash_attention")
    # out [B, n, H, d] bf16; softmax_lse [B, H, n] fp32; no split-KV (one key block); rng_state 16 B, _unused 8 B
    assert [e[2] for e in fwd] == [1 * 256 * 2 * 64 * 2, 1 * 2 * 256 * 4, 16, 8]
    assert any(e[0] == TIE and e[1] == fwd[1][1] for e in sub.events)  # seed/offset live as long as the lse
    bwd = _gpu_op_allocs(sub.events, "_scaled_dot_product_flash_attention_backward")
    # dout [B,H,n,d]-contiguous is not [B,n,H,d]-contiguous: copied; dq, dk, dv; softmax_d [B, H, round128(n)];
    # dq_accum [B, round128(n), H, round32(d)] fp32
    assert [e[2] for e in bwd] == [65536, 65536, 65536, 65536, 1 * 2 * 256 * 4, 1 * 256 * 2 * 64 * 4]
    # flash's grads already have the leaves' strides: AccumulateGrad keeps them, no copies
    assert sum(1 for e in sub.events if e[0] == ALIAS) == 3
    assert not any(e[0] == ALLOC and e[3] == "_scaled_dot_product_flash_attention_for_cpu" for e in sub.events)
    r = replay(sub.events, CachingAllocator())
    # params none; inputs q, k, v, dout (4 x 64 KiB); peak in backward: + out, lse (+rng), go copy, 3 grads,
    # softmax_d, dq_accum
    expected = 4 * 65536 + 65536 + 2048 + 16 + 8 + 65536 + 3 * 65536 + 2048 + 131072
    assert r.tensor_peak_bytes == expected
    assert r.allocated_peak_bytes == expected - 16 - 8 + 2 * 512  # the 16 B and 8 B requests take 512 B blocks


def test_memory_efficient_substitution_by_hand():
    """fp32 on an A100: memory-efficient attention (attention.cu, attention_backward.cu)."""
    t = _attention_trace(torch.float32)
    sub = substitute(t.trace, get_gpu("a100-80gb"), "efficient")
    fwd = _gpu_op_allocs(sub.events, "_scaled_dot_product_efficient_attention")
    # output [B, M, nH, Kv] fp32; logsumexp [B, nH, round32(M)] fp32
    assert [e[2] for e in fwd] == [1 * 256 * 2 * 64 * 4, 1 * 2 * 256 * 4]
    bwd = _gpu_op_allocs(sub.events, "_scaled_dot_product_efficient_attention_backward")
    g = 1 * 256 * 2 * 64 * 4
    # grad_out copy; grad q/k/v; delta via (dO * O).sum(-1): product, sum, contiguous delta;
    # workspace: B * nH * align4(ceil(256/64) * ceil(64/64) * (4 + 64 * 64)) * 4
    assert [e[2] for e in bwd] == [g, g, g, g, g, 256 * 2 * 4, 2 * 256 * 4, 1 * 2 * 4 * 1 * (4 + 64 * 64) * 4]
    assert not any(e[0] == ALIAS for e in sub.events)  # its grads are [B, n, H, d]-major: copied, as on the CPU
    frees = [e for e in sub.events if e[0] == FREE and str(e[1]).startswith("efficient.")]
    assert len(frees) == 5  # every workspace freed by the end of the op


def test_memory_efficient_forward_without_grad_computes_no_logsumexp():
    with FakeTensorMode():
        q = torch.randn(1, 2, 256, 64)
        with torch.no_grad(), MemoryTracker(trace=True) as t:
            F.scaled_dot_product_attention(q, q, q)
    sub = substitute(t.trace, get_gpu("a100-80gb"), "efficient")
    assert [e[2] for e in _gpu_op_allocs(sub.events, "_scaled_dot_product_efficient_attention")] == [131072, 0]


def test_cublas_workspaces_one_per_thread_after_the_first_matmul():
    with FakeTensorMode():
        w = torch.randn(64, 64, requires_grad=True)
        x = torch.randn(8, 64, requires_grad=True)
        with MemoryTracker(trace=True) as t:
            y = torch.tanh(x @ w)
            z = y @ w
            t.mark("backward")
            z.sum().backward()
    sub = substitute(t.trace, get_gpu("h100-sxm"), "math")
    ws = [(i, e) for i, e in enumerate(sub.events) if e[0] == ALLOC and str(e[1]).startswith("cublas.workspace")]
    assert [e[1] for _, e in ws] == ["cublas.workspace.forward", "cublas.workspace.backward"]
    assert all(e[2] == 32 << 20 for _, e in ws)
    first_mm = next(i for i, e in enumerate(sub.events) if e[0] == OP and e[1].startswith("mm"))
    assert ws[0][0] == first_mm + 2  # right after the first mm's output
    assert not any(e[0] == FREE and str(e[1]).startswith("cublas") for e in sub.events)  # kept for the run
    assert len([e for e in substitute(t.trace, get_gpu("h100-sxm"), "math", cublas=False).events
                if e[0] == ALLOC and str(e[1]).startswith("cublas")]) == 0


def test_cudnn_copies_grad_out_only_when_its_innermost_stride_is_not_1():
    """MHA.cpp run_cudnn_SDP_bprop (issue 39): cuDNN >= 9.5.1 permutes grad_out only when its
    innermost stride is not 1; an older one whenever its strides differ from the output's (q's layout)."""
    from attnprof.profiler.measure.tracker import TensorInfo
    from attnprof.profiler.memmodel.sdpa_kernels import cudnn_grad_out_copied

    def info(shape, stride):
        return TensorInfo(None, shape, stride, "bfloat16", False)

    bhnd = info((1, 16, 4096, 64), (16 * 4096 * 64, 4096 * 64, 64, 1))  # [B, H, n, d] contiguous
    bnhd = info((1, 16, 4096, 64), (16 * 4096 * 64, 64, 1024, 1))  # the transpose of [B, n, H, d]
    odd = info((1, 16, 4096, 64), (16 * 4096 * 64, 4096 * 64, 1, 4096))  # innermost stride 4096
    assert not cudnn_grad_out_copied(bhnd, bnhd, 91900) and not cudnn_grad_out_copied(bnhd, bhnd, 91900)
    assert cudnn_grad_out_copied(odd, bhnd, 91900)
    assert cudnn_grad_out_copied(bhnd, bnhd, 90400) and not cudnn_grad_out_copied(bnhd, bnhd, 90400)
