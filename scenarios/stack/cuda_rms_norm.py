"""RMSNorm as CUDA runs it, for a step traced on the CPU for a GPU (issue 39).

torch's ``rms_norm`` (aten/src/ATen/native/layer_norm.cpp, ``rms_norm_symint``) calls
``_fused_rms_norm``, whose dispatch entry in torch 2.11's native_functions.yaml is

    CUDA: _fused_rms_norm_cuda    MPS: _fused_rms_norm_mps    CompositeImplicitAutograd: rms_norm_composite

so the CPU runs the composite (an upcast copy, ``pow``, ``mean``, ``rsqrt``, two ``mul``s, a
downcast, and their backward: about 8 ops forward, 15 backward, with two float32 (n, d)
tensors saved for a bfloat16 input), while CUDA runs one kernel each way. What the CUDA
kernels allocate (aten/src/ATen/native/cuda/layer_norm_kernel.cu, "RMSNorm is implemented by
reusing layer_norm's kernels", ``_fused_rms_norm_cuda`` / ``_fused_rms_norm_backward_cuda``):

- forward: ``Y = empty_like(X)`` (contiguous) then ``rstd = empty({M}, acc_type)``, returned
  viewed as (*batch, 1, ...): M = the rows, acc_type = ``toAccumulateType(dtype, is_cuda=true)``,
  float32 for float16, bfloat16 and float32, float64 for float64;
- autograd (torch 2.11's derivatives.yaml, ``_fused_rms_norm``) saves ``input``, ``weight`` and
  ``result1`` (rstd) and, outside double backward, calls ``_fused_rms_norm_backward``;
- backward: ``dX = empty_like(X)`` when the input needs a gradient, then ``dgamma =
  empty_like(gamma)`` when the weight does (``output_mask``).

Both fall back to the composite where torch does: a weight whose dtype is not the input's
(torch warns "Can not dispatch to fused implementation"), or no fused kernel for the dtype.

``use_cuda_kernels(module)`` swaps every ``nn.RMSNorm`` of a module for ``CudaRMSNorm``, which
keeps the same weight parameter (the same storage, in the same place among the parameters).
Its ops are custom ops named as torch's (``attnprof::_fused_rms_norm``, traced as
``_fused_rms_norm``), whose fake kernels allocate what the CUDA kernels allocate, in that order,
and whose CPU kernels compute the same values as ``F.rms_norm`` (a small point predicted on real
CPU tensors runs them). Only a CPU trace of a GPU step uses them (``Workload``'s device kernels);
a real CUDA run uses torch's own kernel.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

NAMESPACE = "attnprof"
FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # AT_DISPATCH_FLOATING_TYPES_AND2


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """at::toAccumulateType(dtype, is_cuda=true) for the floating dtypes the kernel takes."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _stat_shape(x: torch.Tensor, k: int) -> list:
    """rstd's shape: the input's leading dimensions, 1 for each normalized one."""
    return list(x.shape[:x.dim() - k]) + [1] * k


def _rstd(x: torch.Tensor, k: int, eps: Optional[float]) -> torch.Tensor:
    acc = _acc_dtype(x.dtype)
    eps = torch.finfo(acc).eps if eps is None else eps  # the kernel's default: the acc type's epsilon
    dims = tuple(range(x.dim() - k, x.dim()))
    return torch.rsqrt(x.to(acc).pow(2).mean(dims, keepdim=True) + eps)  # (*batch, 1, ...)


def _define() -> None:
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    lib.define("_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)")
    lib.define("_fused_rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor rstd, "
               "Tensor? weight, bool[2] output_mask) -> Tensor[]")

    def forward_cpu(x, normalized_shape, weight, eps):
        rstd = _rstd(x, len(normalized_shape), eps)
        y = x.to(rstd.dtype) * rstd
        if weight is not None:
            y = y * weight.to(rstd.dtype)
        return y.to(x.dtype).contiguous(), rstd

    def forward_fake(x, normalized_shape, weight, eps):
        y = torch.empty_like(x, memory_format=torch.contiguous_format)  # Y first, then rstd
        rstd = x.new_empty(_stat_shape(x, len(normalized_shape)), dtype=_acc_dtype(x.dtype))
        return y, rstd

    def backward_cpu(dy, x, normalized_shape, rstd, weight, output_mask):
        k = len(normalized_shape)
        dims = tuple(range(x.dim() - k, x.dim()))
        xhat = x.to(rstd.dtype) * rstd  # (*batch, N)
        g = dy.to(rstd.dtype) * (weight.to(rstd.dtype) if weight is not None else 1)
        out = []
        if output_mask[0]:  # d/dx of xhat * w: rstd * (g - xhat * mean(g * xhat))
            out.append((rstd * (g - xhat * (g * xhat).mean(dims, keepdim=True))).to(x.dtype).contiguous())
        if output_mask[1] and weight is not None:
            dw = dy.to(rstd.dtype) * xhat  # (*batch, N): summed over the batch dimensions, if any
            out.append((dw.sum(tuple(range(x.dim() - k))) if x.dim() > k else dw).to(weight.dtype))
        return out

    def backward_fake(dy, x, normalized_shape, rstd, weight, output_mask):
        out = []
        if output_mask[0]:
            out.append(torch.empty_like(x, memory_format=torch.contiguous_format))  # dX, then dgamma
        if output_mask[1] and weight is not None:
            out.append(torch.empty_like(weight, memory_format=torch.contiguous_format))
        return out

    for name, cpu, fake in (("_fused_rms_norm", forward_cpu, forward_fake),
                            ("_fused_rms_norm_backward", backward_cpu, backward_fake)):
        lib.impl(name, cpu, "CPU")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)

    def setup_context(ctx, inputs, output):
        x, normalized_shape, weight, _ = inputs
        ctx.normalized_shape = list(normalized_shape)
        ctx.has_weight = weight is not None
        ctx.save_for_backward(x, weight, output[1])  # input, weight, result1: derivatives.yaml
        ctx.set_materialize_grads(False)  # rstd's gradient stays undefined, as in torch's node (no zeros)

    def backward(ctx, dy, _drstd):
        if dy is None:
            return None, None, None, None
        x, weight, rstd = ctx.saved_tensors
        mask = [ctx.needs_input_grad[0], ctx.has_weight and ctx.needs_input_grad[2]]
        grads = iter(torch.ops.attnprof._fused_rms_norm_backward(dy, x, ctx.normalized_shape, rstd, weight, mask))
        dx = next(grads) if mask[0] else None
        dw = next(grads) if mask[1] else None
        return dx, None, dw, None

    torch.library.register_autograd(f"{NAMESPACE}::_fused_rms_norm", backward, setup_context=setup_context, lib=lib)
    _LIBRARIES.append(lib)  # kept: a Library's registrations last as long as it does


_LIBRARIES: list = []


def fused_rms_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor],
                   eps: Optional[float]) -> torch.Tensor:
    """``F.rms_norm`` as CUDA computes it (see the module docstring): the fused op, or torch's
    composite where CUDA falls back to it."""
    if not _LIBRARIES:
        _define()
    if x.dtype not in FUSED_DTYPES or (weight is not None and weight.dtype != x.dtype):
        return F.rms_norm(x, list(normalized_shape), weight, eps)  # rms_norm_symint's composite fallbacks
    return torch.ops.attnprof._fused_rms_norm(x, list(normalized_shape), weight, eps)[0]


class CudaRMSNorm(nn.Module):
    """An ``nn.RMSNorm`` (its weight, shape and eps) run through ``fused_rms_norm``."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.normalized_shape = tuple(norm.normalized_shape)
        self.eps = norm.eps
        self.weight = norm.weight  # the same Parameter: same storage, same place among the parameters

    def forward(self, x):  # (*batch, *normalized_shape) -> the same
        return fused_rms_norm(x, self.normalized_shape, self.weight, self.eps)


def use_cuda_kernels(module: nn.Module) -> int:
    """Swap every ``nn.RMSNorm`` inside ``module`` for a ``CudaRMSNorm`` of the same weight;
    returns how many were swapped."""
    rms = getattr(nn, "RMSNorm", None)
    if rms is None:  # a torch without nn.RMSNorm runs layers.RMSNormFallback: ordinary ops everywhere
        return 0
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is rms:
                setattr(parent, name, CudaRMSNorm(child))  # same key: the module order is kept
                swapped += 1
    return swapped
