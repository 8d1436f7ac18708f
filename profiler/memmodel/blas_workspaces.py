"""cuBLAS and cuBLASLt workspaces: what torch's BLAS handle pool takes from the caching allocator (issue 39).

Read from torch 2.11's ``aten/src/ATen/cuda/CublasHandlePool.cpp`` and ``aten/src/ATen/native/cuda/Blas.cpp``
(the pool as it stood from torch 2.9, when ``float32Precision`` arrived, until later main changed it; below):

* **cuBLAS.** ``getCurrentCUDABlasHandle`` calls ``setWorkspaceForHandle(handle, stream)`` at a thread's
  first BLAS call: one workspace of ``getChosenWorkspaceSize()`` bytes (``parseChosenWorkspaceSize``:
  ":4096:2:16:8" = 8,519,680 B by default, 32 MiB (":4096:8") on compute capability 9.x, 10.x, 12.x;
  ``CUBLAS_WORKSPACE_CONFIG=":SIZE_KIB:COUNT..."`` overrides) through the caching allocator, kept in a
  map keyed by (handle, stream) for the rest of the run. Handles are per thread (a ``thread_local``
  pool window), and autograd runs CUDA backward on its own device thread: two workspaces in a
  training step.
* **cuBLASLt.** ``addmm`` with a 1-D bias goes through cuBLASLt's bias epilogue
  (``addmm_out_cuda_impl``: ``isInputCompliesAddmmCudaLt``; ``F.linear`` with a bias is such an
  addmm). ``gemm_and_bias`` takes ``getCUDABlasLtWorkspace()``, which shares the cuBLAS workspace
  only when ``TORCH_CUBLASLT_UNIFIED_WORKSPACE`` is exactly "1" (``check_env(...) == true``);
  otherwise it allocates its own, of ``getCUDABlasLtWorkspaceSize()`` bytes
  (``CUBLASLT_WORKSPACE_SIZE`` KiB, default 1024, capped at the cuBLAS workspace unless the variable
  is "0"), kept per (handle, stream) like the cuBLAS one: **1 MiB more per thread that runs such an
  addmm**. ``mm`` enters the same function with beta 0 and never takes the Lt path.
  ``DISABLE_ADDMM_CUDA_LT=1`` turns the Lt path off; ``TORCH_BLAS_PREFER_CUBLASLT=1``
  (``blasPreferredBackend``) sends every GEMM through cuBLASLt, so the first matmul takes it.

Measured on the H200 of 2026-12-04 (torch 2.11.0+cu130): every model-scope point held exactly 1 MiB
more than the model without this rule where only the forward thread runs a biased addmm (plain
mode), and 2 MiB more where the backward thread runs one too (checkpoint mode recomputes the
MLP's forward there); scope-attention points, which run no projection, none.

Later torch main reads otherwise (not modelled; the H200's torch 2.11 agrees with the above): one
revision shares cuBLAS's workspace with cuBLASLt by default and keys it by (device, stream), so the
two threads share one; a later one stops caching workspaces by default.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from attnprof.profiler.aten_ops import CUBLAS_OPS
from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.memmodel.layout import contiguous

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
LT_SIZE_ENV = "CUBLASLT_WORKSPACE_SIZE"
LT_UNIFIED_ENV = "TORCH_CUBLASLT_UNIFIED_WORKSPACE"
LT_DISABLE_ENV = "DISABLE_ADDMM_CUDA_LT"
PREFER_LT_ENV = "TORCH_BLAS_PREFER_CUBLASLT"  # "1": blasPreferredBackend() is cuBLASLt, for every GEMM
ENV = (CUBLAS_ENV, LT_SIZE_ENV, LT_UNIFIED_ENV, LT_DISABLE_ENV, PREFER_LT_ENV)  # what the model reads

CUBLAS_DEFAULT_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_BIG_BYTES = 4096 * 8 * 1024
CUBLAS_BIG_MAJORS = (9, 10, 12)
LT_DEFAULT_KIB = 1024  # parseCUDABlasLtWorkspaceSize: "default size in KiB according to #73328"
LT_OPS = frozenset({"addmm", "_addmm_activation"})  # ops whose CUDA kernel may take the cuBLASLt path
LT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})  # isInputCompliesAddmmCudaLt (CUDA)


def _env(env: Optional[Mapping], name: str) -> Optional[str]:
    return (os.environ if env is None else env).get(name)


def cublas_workspace_bytes(gpu: GpuSpec, config: Optional[str] = None) -> int:
    """One cuBLAS workspace (``getChosenWorkspaceSize``), honouring CUBLAS_WORKSPACE_CONFIG."""
    text = os.environ.get(CUBLAS_ENV) if config is None else config
    if text:
        pairs = re.findall(r":([0-9]+):([0-9]+)", text)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return CUBLAS_BIG_BYTES if gpu.compute_capability[0] in CUBLAS_BIG_MAJORS else CUBLAS_DEFAULT_BYTES


def cublaslt_workspace_bytes(gpu: GpuSpec, env: Optional[Mapping] = None) -> int:
    """The bytes a thread's first cuBLASLt matmul allocates beside the cuBLAS workspace: 0 when the
    two are unified (``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``), else ``getCUDABlasLtWorkspaceSize()``."""
    unified = _env(env, LT_UNIFIED_ENV)
    if unified == "1":
        return 0
    kib = LT_DEFAULT_KIB
    m = re.match(r"\s*\+?([0-9]+)", _env(env, LT_SIZE_ENV) or "")  # std::stoi reads a leading integer
    if m:
        kib = int(m.group(1))
    size = kib * 1024
    if unified != "0":  # the size is capped at the cuBLAS workspace unless unification is refused
        size = min(size, cublas_workspace_bytes(gpu, _env(env, CUBLAS_ENV) or ""))
    return size


def takes_cublaslt(op: str, info, env: Optional[Mapping] = None) -> bool:
    """Whether ``op`` (a base name) with these traced arguments runs cuBLASLt on CUDA: every
    matmul when ``TORCH_BLAS_PREFER_CUBLASLT=1``; else ``isInputCompliesAddmmCudaLt``'s 1-D bias
    case: addmm(bias, mat1, mat2) with a contiguous bias of mat2's column count, 2-D matrices of
    sizes > 1, a floating dtype, beta 1 (a ``beta`` keyword other than 1 says no; ``F.linear``
    passes none); the result is the op's own contiguous output. Not modelled: ``_addmm_activation``'s
    2-D bias with an activation (taken as not Lt)."""
    if op not in CUBLAS_OPS:  # most ops: no environment read (called per op until a thread's first Lt call)
        return False
    if _env(env, PREFER_LT_ENV) == "1":
        return True
    if op not in LT_OPS or _env(env, LT_DISABLE_ENV) == "1":
        return False
    if isinstance(info, dict) and (info.get("kwargs") or {}).get("beta", 1) != 1:
        return False
    args = (info.get("args") or []) if isinstance(info, dict) else []
    if len(args) < 3 or any(a is None for a in args[:3]):
        return False
    bias, mat1, mat2 = args[:3]
    squeezed = [s for s in bias.shape if s != 1]
    return bool(len(mat1.shape) == 2 and len(mat2.shape) == 2 and min(*mat1.shape, *mat2.shape) > 1
                and len(bias.shape) >= 1 and len(squeezed) <= 1 and bias.shape[-1] == mat2.shape[1]
                and contiguous(bias.shape, bias.stride) and mat1.dtype in LT_DTYPES)
