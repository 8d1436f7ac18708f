"""What a GPU allocates that the CPU trace does not show, or shows differently.

1. **SDPA.** The CPU runs ``F.scaled_dot_product_attention`` as its own flash kernel
   (``_scaled_dot_product_flash_attention_for_cpu`` and its ``_backward``). A GPU picks a
   backend (``choose_sdpa_backend``) whose outputs, saved tensors and workspaces differ;
   ``substitute`` replaces those two ops' allocations in the trace by the chosen
   kernel's, in the order the CUDA code allocates them. A fake CUDA device cannot be
   used instead: on the CPU build of torch, fake CUDA tensors abort the process in
   backward (../shared/NOTES.md). The math backend needs no substitution: the trace is
   then recorded with SDPA forced onto its math path, the same decomposed ops a GPU runs.
2. **cuBLAS and cuBLASLt workspaces** (``blas_workspaces``). Allocated through the caching
   allocator at a thread's first cuBLAS call (and its first cuBLASLt one: an addmm with a 1-D
   bias), one per (thread, stream), never freed during a run: the forward thread's, and
   autograd's device thread's in backward.

The CUDA code each rule mirrors is named where it is applied (pytorch/pytorch main,
``aten/src/ATen/native/transformers/cuda/...``, read for torch 2.13). docs/gpu.md lists
all of it with what is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.aten_ops import CUBLAS_OPS, op_base
from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.memmodel import cuda_ops
from attnprof.profiler.memmodel.blas_workspaces import cublas_workspace_bytes, cublaslt_workspace_bytes, takes_cublaslt
from attnprof.profiler.memmodel.layout import contiguous, dense
from attnprof.profiler.memmodel.sdpa_choice import HALF
from attnprof.profiler.records import DTYPE_BYTES

ALLOC, FREE, OP, MARK = "alloc", "free", "op", "mark"  # = profiler.measure.tracker's (no torch import here)
ALIAS = "alias"  # (ALIAS, new_name, existing_name): one more name for an existing block
TIE = "tie"  # (TIE, owner, [names]): free these names when owner's block is freed

CPU_FLASH_FWD = "_scaled_dot_product_flash_attention_for_cpu"
CPU_FLASH_BWD = "_scaled_dot_product_flash_attention_for_cpu_backward"
GPU_OP = {"flash": "_scaled_dot_product_flash_attention", "efficient": "_scaled_dot_product_efficient_attention",
          "cudnn": "_scaled_dot_product_cudnn_attention"}


def _up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def flash_num_splits(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_size: int, sm_count: int) -> int:
    """flash_api.cpp ``set_params_splitkv`` + ``num_splits_heuristic`` (mha_fwd, no dropout)."""
    block_n = 256 if head_size <= 64 else (128 if head_size <= 128 else 64)
    num_n_blocks = (seqlen_k + block_n - 1) // block_n
    num_m_blocks = (seqlen_q + 63) // 64
    bhm, num_sms = batch * heads * num_m_blocks, sm_count * 2  # "x2: 128 threads per block"
    if bhm >= 0.8 * num_sms:
        return 1
    max_splits = min(128, num_sms, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-num_n_blocks // s) != -(-num_n_blocks // (s - 1))

    eff = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
            continue
        waves = bhm * s / num_sms
        eff.append(waves / math.ceil(waves))
    best = max(eff) if eff else 0.0
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


# --- substitution -------------------------------------------------------------------------------
@dataclass
class GpuEvents:
    events: list
    backend: str
    substituted: int = 0  # SDPA ops replaced
    notes: list = field(default_factory=list)


def _transposed(info):
    """(shape, stride) of ``t.transpose(1, 2)`` for a [B, H, n, d] tensor."""
    s, st = info.shape, info.stride
    return (s[0], s[2], s[1], s[3]), (st[0], st[2], st[1], st[3])


class _Names:
    def __init__(self):
        self.n = 0

    def __call__(self, what: str) -> str:
        self.n += 1
        return f"{what}#{self.n}"


def _forward(backend: str, info: dict, outs: list, gpu: GpuSpec, name: _Names, dropout: bool = False) -> list:
    q, k, v = info["args"][:3]
    B, H, nq, d = q.shape
    nk, dv = k.shape[2], v.shape[3]
    el = DTYPE_BYTES[q.dtype]
    grad = info["grad_enabled"] and any(t is not None and t.requires_grad for t in (q, k, v))
    out_s, lse_s = outs[0], outs[1]
    op = GPU_OP[backend]
    ev = [(OP, op, None)]
    if backend == "flash":
        # (a GPU's trace has q, k, v padded to a multiple of 8 already, as attention.cpp pads them:
        # measure/cuda_branches.py; the rounding below is then a no-op)
        # flash_api.cpp mha_fwd: out = empty_like(q_padded) [B, n, H, round8(d)];
        # softmax_lse [B, H, n] fp32; set_params_splitkv's softmax_lse_accum
        # [splits, B, H, n] and out_accum [splits, B, H, n, head_size_rounded] fp32 (freed
        # on return); rng_state (2 x uint64) and _unused (uint64) on the device, returned as
        # philox_seed/offset and saved with the logsumexp.
        dp, dvp = _up(d, 8), _up(dv, 8)
        hsr = _up(dp, 32 if dp <= 128 else 64)
        ev += [(ALLOC, out_s, B * nq * H * dvp * el, op), (ALLOC, lse_s, B * H * nq * 4, op)]
        # set_params_splitkv splits only when p_dropout == 0 ("SplitKV is not implemented for dropout")
        splits = 1 if dropout else flash_num_splits(B, H, nq, nk, dp, gpu.sm_count)
        tmp = []
        if splits > 1:
            tmp = [name("flash.softmax_lse_accum"), name("flash.out_accum")]
            ev += [(ALLOC, tmp[0], splits * B * H * nq * 4, op), (ALLOC, tmp[1], splits * B * H * nq * hsr * 4, op)]
        rng, unused = name("flash.rng_state"), name("flash.rng_unused")
        ev += [(ALLOC, rng, 16, op), (ALLOC, unused, 8, op)]
        if dropout:  # issue 39: `if (p_dropout > 0.0)`: rng_state = at::empty({2}, kUInt64), the first freed
            first, rng = rng, name("flash.rng_state")
            ev += [(ALLOC, rng, 16, op), (FREE, first)]
        ev += [(TIE, lse_s, [rng, unused])]
        ev += [(FREE, t) for t in reversed(tmp)]
    elif backend == "efficient":
        # attention.cu _efficient_attention_forward: output [B, M, nH, Kv]; logsumexp
        # [B, nH, ceil(M / kAlignLSE) * kAlignLSE] fp32 (kAlignLSE = 32) only when an input
        # requires grad (should_compute_logsumexp); output_accum fp32 when the kernel needs an
        # accumulator (fp16/bf16 with Kv > 128: not kSingleValueIteration); seed/offset on the CPU.
        ev += [(ALLOC, out_s, B * nq * H * dv * el, op),
               (ALLOC, lse_s, B * H * _up(nq, 32) * 4 if grad else 0, op)]
        if q.dtype in HALF and dv > 128:
            acc = name("efficient.output_accum")
            ev += [(ALLOC, acc, B * nq * H * dv * 4, op), (FREE, acc)]
    elif backend == "cudnn":
        # attention.cu _scaled_dot_product_cudnn_attention_cuda: output like q; softmax stats
        # [B, H, n, 1] fp32 when training; seed and offset: one int64 each on the device.
        ev += [(ALLOC, out_s, B * nq * H * dv * el, op), (ALLOC, lse_s, B * H * nq * 4 if grad else 0, op)]
        seed, offset = name("cudnn.seed"), name("cudnn.offset")
        ev += [(ALLOC, seed, 8, op), (ALLOC, offset, 8, op), (TIE, lse_s, [seed, offset])]
    return ev


def cudnn_grad_out_copied(go, q, cudnn_version: Optional[int] = None) -> bool:
    """Whether cuDNN attention's backward copies grad_out (issue 39). aten/src/ATen/native/cudnn/
    MHA.cpp ``run_cudnn_SDP_bprop``: with cuDNN >= 9.5.1 (CUDNN_VERSION 90501) only a grad_out
    whose innermost stride is not 1 is permuted to the output's layout
    (``permute_to_matching_layout``); with an older cuDNN, one whose strides differ from the
    output's (``same_strides``, which skips size-1 dimensions, as the tracker's strides do:
    it records theirs as 1), which the forward allocated in q's layout (``alloc_with_matching_layout``)."""
    if cudnn_version is None:
        from attnprof.profiler.memmodel.sdpa_choice import torch_facts

        cudnn_version = torch_facts()["cudnn"]
    if cudnn_version >= 90501:
        return go.stride[-1] != 1
    return not (dense(q.shape, q.stride) and tuple(go.stride) == tuple(q.stride))


def _backward(backend: str, info: dict, outs: list, gpu: GpuSpec, name: _Names, stealable: dict) -> list:
    go, q, k, v = info["args"][:4]
    B, H, nq, d = q.shape
    nk, dv = k.shape[2], v.shape[3]
    Hk = k.shape[1]  # K/V heads: fewer than H with grouped KV heads (enable_gqa, issue 24)
    el = DTYPE_BYTES[q.dtype]
    op = GPU_OP[backend] + "_backward"
    ev = [(OP, op, None)]
    tmp = []
    # _flash_attention_backward: contiguous_grad_out = grad_out.contiguous() (of the
    # [B, n, H, d] transpose); _efficient_attention_backward: "handle potentially
    # non-contiguous grad_out through a copy". cuDNN: cudnn_grad_out_copied.
    if cudnn_grad_out_copied(go, q) if backend == "cudnn" else not contiguous(*_transposed(go)):
        tmp.append(name(f"{backend}.grad_out_contiguous"))
        ev.append((ALLOC, tmp[-1], B * nq * H * dv * el, op))
    if backend == "flash":
        # flash_api.cpp mha_bwd: dq/dk/dv = empty_like(q/k/v) (head dim rounded to 8);
        # softmax_d [B, H, round128(n)] fp32; dq_accum [B, round128(n), H, head_size_rounded]
        # fp32 (non-deterministic); both dropped on return.
        dp, dvp = _up(d, 8), _up(dv, 8)
        hsr, nqr = _up(dp, 32 if dp <= 128 else 64), _up(nq, 128)
        ev += [(ALLOC, outs[0], B * nq * H * dp * el, op), (ALLOC, outs[1], B * nk * Hk * dp * el, op),
               (ALLOC, outs[2], B * nk * Hk * dvp * el, op)]
        tmp += [name("flash.softmax_d"), name("flash.dq_accum")]
        ev += [(ALLOC, tmp[-2], B * H * nqr * 4, op), (ALLOC, tmp[-1], B * nqr * H * hsr * 4, op)]
        if Hk != H:  # MQA / GQA: dk_expanded, dv_expanded [B, n, H, d], summed into dk, dv per group
            tmp += [name("flash.dk_expanded"), name("flash.dv_expanded")]
            ev += [(ALLOC, tmp[-2], B * nk * H * dp * el, op), (ALLOC, tmp[-1], B * nk * H * dvp * el, op)]
    elif backend == "efficient":
        # attention_backward.cu _efficient_attention_backward: grad_q/k/v = at::empty(sizes)
        # ([B, M, nH, K]); delta [B, nH, M] fp32, computed by the kernel for fp16/bf16
        # (kKernelComputesDelta), else (grad_out.float() * out.float()).sum(-1).transpose()
        # .contiguous(): a [B, M, nH, Kv] fp32 product and a [B, M, nH] sum live meanwhile;
        # workspace = B * nH * workspace_strideBH() * 4 (kernel_backward.h: the split-keys dQ
        # accumulator, workspace_elements_gq: ceil(M/kBlockSizeI) * ceil(K/kBlockSizeJ) tiles
        # of kBlockSizeI x kBlockSizeJ fp32 plus a 16-byte header; tile 64x64 fp32, 64x128
        # fp16/bf16 assumed).
        ev += [(ALLOC, outs[0], B * nq * H * d * el, op), (ALLOC, outs[1], B * nk * H * d * el, op),
               (ALLOC, outs[2], B * nk * H * dv * el, op)]
        delta = name("efficient.delta")
        if q.dtype in HALF:
            ev.append((ALLOC, delta, B * H * nq * 4, op))
        else:
            prod, total = name("efficient.delta_product"), name("efficient.delta_sum")
            ev += [(ALLOC, prod, B * nq * H * dv * 4, op), (ALLOC, total, B * nq * H * 4, op),
                   (ALLOC, delta, B * H * nq * 4, op), (FREE, total), (FREE, prod)]
        tmp.append(delta)
        bi, bj = 64, (64 if q.dtype == "float32" else 128)
        gq_elems = -(-nq // bi) * -(-d // bj) * (4 + bi * bj)
        tmp.append(name("efficient.workspace"))
        ev.append((ALLOC, tmp[-1], B * H * _up(gq_elems, 4) * 4, op))
    elif backend == "cudnn":
        # _cudnn_attention_backward: dq/dk/dv = empty_like(q/k/v); cuDNN's workspace through the
        # caching allocator: assumed like FlashAttention-2's (an fp32 dQ accumulator and fp32
        # row sums). Not read from cuDNN: the least certain substitution here.
        ev += [(ALLOC, outs[0], B * nq * H * d * el, op), (ALLOC, outs[1], B * nk * H * d * el, op),
               (ALLOC, outs[2], B * nk * H * dv * el, op)]
        tmp.append(name("cudnn.workspace"))
        ev.append((ALLOC, tmp[-1], B * H * nq * d * 4 + B * H * nq * 4, op))
    ev += [(FREE, t) for t in reversed(tmp)]
    # flash and cuDNN allocate each gradient like its input (empty_like keeps the strides of
    # a dense input), so AccumulateGrad can keep it as .grad; the CPU kernel's gradients
    # (like memory-efficient attention's) come out [B, n, H, d]-major and get copied.
    if backend in ("flash", "cudnn"):
        for serial, t in zip(outs, (q, k, v)):
            if dense(t.shape, t.stride):
                stealable[serial] = True
    return ev


def _outputs(events: list, i: int, want: int) -> list:
    """The serials of the ALLOC events right after the OP at ``i`` (at most ``want``)."""
    outs = []
    j = i + 1
    while j < len(events) and events[j][0] == ALLOC and len(outs) < want:
        outs.append(events[j][1])
        j += 1
    return outs


def substitute(events: list, gpu: GpuSpec, backend: str, *, cublas: bool = True,
               cublas_bytes: Optional[int] = None, ops: bool = True, dropout: float = 0.0) -> GpuEvents:
    """The trace with the GPU's SDPA allocations and cuBLAS/cuBLASLt workspaces in place of the CPU's,
    and (``ops``) the CUDA kernels' allocations of the ops ``cuda_ops`` rewrites. ``dropout``: the
    SDPA calls' dropout_p, which a GPU's trace leaves out of the fused op (measure/cuda_branches.py).

    ``backend`` "math" leaves SDPA alone (record the trace with ``sdpa_math=True``).
    """
    out = GpuEvents([], backend)
    name = _Names()
    stealable: dict = {}
    ws_bytes = cublas_workspace_bytes(gpu) if cublas_bytes is None else cublas_bytes
    lt_bytes = cublaslt_workspace_bytes(gpu) if cublas else 0
    phase, have_ws, have_lt, pending = "forward", set(), set(), []
    i, n = 0, len(events)
    while i < n:
        e = events[i]
        kind = e[0]
        if pending and kind != ALLOC:  # after the matmul's outputs
            out.events += pending
            pending = []
        if kind == MARK:
            if e[1] == "backward":
                phase = "backward"
            out.events.append(e)
            i += 1
            continue
        if kind != OP:
            out.events.append(e)
            i += 1
            continue
        base = op_base(e[1])
        if cublas and base in CUBLAS_OPS and phase not in have_ws:
            have_ws.add(phase)
            pending.append((ALLOC, f"cublas.workspace.{phase}", ws_bytes, "cuBLAS workspace"))
        if lt_bytes and phase not in have_lt and takes_cublaslt(base, e[2]):
            have_lt.add(phase)
            pending.append((ALLOC, f"cublaslt.workspace.{phase}", lt_bytes, "cuBLASLt workspace"))
        if backend != "math" and base == CPU_FLASH_FWD and e[2]:
            outs = _outputs(events, i, 2)
            if len(outs) == 2:
                out.events += _forward(backend, e[2], outs, gpu, name, dropout > 0)
                out.substituted += 1
                i += 1 + len(outs)
                continue
            out.notes.append("an SDPA forward with an unexpected output count was left as on the CPU")
        if backend != "math" and base == CPU_FLASH_BWD and e[2]:
            outs = _outputs(events, i, 3)
            if len(outs) == 3:
                out.events += _backward(backend, e[2], outs, gpu, name, stealable)
                out.substituted += 1
                i += 1 + len(outs)
                continue
            out.notes.append("an SDPA backward with an unexpected output count was left as on the CPU")
        # AccumulateGrad's clone_obey_contract copy of a gradient the GPU kernel already
        # allocated with the input's strides: no copy on the GPU (the block is kept as .grad).
        if (base == "new_empty_strided" and i + 3 < n and events[i + 1][0] == ALLOC
                and events[i + 2][0] == OP and op_base(events[i + 2][1]) == "copy_"
                and events[i + 3][0] == FREE and events[i + 3][1] in stealable):
            grad = events[i + 3][1]
            del stealable[grad]
            out.events += [e, (ALIAS, events[i + 1][1], grad), events[i + 2], events[i + 3]]
            i += 4
            continue
        out.events.append(e)
        i += 1
    out.events += pending
    if ops:  # issue 39: ops whose CUDA kernel allocates otherwise
        out.events = cuda_ops.apply(out.events, gpu).events
    return out
