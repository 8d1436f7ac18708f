"""cuBLAS and cuBLASLt workspaces (profiler/memmodel/blas_workspaces.py): their sizes, which
ops take the cuBLASLt path, and one of each per thread in a traced step."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.measure.tracker import MemoryTracker, TensorInfo
from attnprof.profiler.memmodel.blas_workspaces import (ENV, cublas_workspace_bytes, cublaslt_workspace_bytes,
                                                        takes_cublaslt)
from attnprof.profiler.memmodel.sdpa_kernels import ALLOC, OP, substitute

H200 = get_gpu("h200")


@pytest.fixture(autouse=True)
def no_blas_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_cublas_workspace_sizes():
    assert cublas_workspace_bytes(get_gpu("a100-80gb")) == 4096 * 1024 * 2 + 16 * 1024 * 8 == 8_519_680
    assert cublas_workspace_bytes(get_gpu("l4")) == 8_519_680
    assert cublas_workspace_bytes(get_gpu("h100-sxm")) == 32 << 20
    assert cublas_workspace_bytes(get_gpu("h100-sxm"), ":4096:2:16:8") == 8_519_680
    assert cublas_workspace_bytes(get_gpu("a100-80gb"), ":16:8") == 128 << 10


def test_cublaslt_workspace_is_its_own_mebibyte_unless_unified():
    assert cublaslt_workspace_bytes(H200, {}) == 1 << 20
    assert cublaslt_workspace_bytes(H200, {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}) == 0  # shares cuBLAS's
    assert cublaslt_workspace_bytes(H200, {"CUBLASLT_WORKSPACE_SIZE": "4096"}) == 4 << 20
    # capped at the cuBLAS workspace, unless unification is refused with "0"
    assert cublaslt_workspace_bytes(H200, {"CUBLASLT_WORKSPACE_SIZE": "65536"}) == 32 << 20
    assert cublaslt_workspace_bytes(H200, {"CUBLASLT_WORKSPACE_SIZE": "65536",
                                           "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}) == 64 << 20
    assert cublaslt_workspace_bytes(H200, {"CUBLASLT_WORKSPACE_SIZE": "lots"}) == 1 << 20  # torch warns, default


def _info(*shapes, dtype="bfloat16"):
    args = []
    for shape in shapes:
        stride, step = [], 1
        for s in reversed(shape):
            stride.insert(0, step)
            step *= s
        args.append(TensorInfo(None, tuple(shape), tuple(stride), dtype, False))
    return {"grad_enabled": True, "args": args}


def test_only_an_addmm_with_a_bias_vector_takes_cublaslt():
    assert takes_cublaslt("addmm", _info((1024,), (8, 512), (512, 1024)), {})
    assert not takes_cublaslt("mm", _info((8, 512), (512, 1024)), {})  # beta 0: plain cuBLAS
    assert not takes_cublaslt("addmm", _info((8, 1024), (8, 512), (512, 1024)), {})  # a 2-D self
    assert not takes_cublaslt("addmm", _info((1024,), (1, 512), (512, 1024)), {})  # a one-row matrix
    assert not takes_cublaslt("addmm", _info((1024,), (8, 512), (512, 1024), dtype="int64"), {})
    assert not takes_cublaslt("addmm", _info((1024,), (8, 512), (512, 1024)), {"DISABLE_ADDMM_CUDA_LT": "1"})
    assert not takes_cublaslt("addmm", None, {})  # not described: no claim
    strided_bias = _info((1024,), (8, 512), (512, 1024))
    strided_bias["args"][0] = TensorInfo(None, (1024,), (2,), "bfloat16", False)
    assert not takes_cublaslt("addmm", strided_bias, {})  # a bias that is not contiguous
    beta = {**_info((1024,), (8, 512), (512, 1024)), "kwargs": {"beta": 0.5}}
    assert not takes_cublaslt("addmm", beta, {})
    # TORCH_BLAS_PREFER_CUBLASLT=1: every GEMM on cuBLASLt
    assert takes_cublaslt("mm", _info((8, 512), (512, 1024)), {"TORCH_BLAS_PREFER_CUBLASLT": "1"})


def _linear_step():
    with FakeTensorMode():
        w = torch.randn(64, 32, requires_grad=True)
        b = torch.randn(64, requires_grad=True)
        x = torch.randn(8, 32, requires_grad=True)
        with MemoryTracker(trace=True) as t:
            y = F.linear(x, w, b)
            t.mark("backward")
            y.sum().backward()
    return t.trace


def test_one_cublaslt_workspace_per_thread_that_runs_a_biased_addmm():
    events = substitute(_linear_step(), H200, "math").events
    lt = [e for e in events if e[0] == ALLOC and str(e[1]).startswith("cublaslt.workspace")]
    assert [e[1] for e in lt] == ["cublaslt.workspace.forward"]  # backward runs mm only
    assert lt[0][2] == 1 << 20
    i = events.index(lt[0])
    assert events[i - 1][1] == "cublas.workspace.forward"  # getCUDABlasLtWorkspace sets up the handle first
    assert next(e for e in reversed(events[:i]) if e[0] == OP)[1].startswith("addmm")
    assert not [e for e in substitute(_linear_step(), H200, "math", cublas=False).events
                if e[0] == ALLOC and "workspace" in str(e[1])]
