"""Composite ops that branch on the device, taken as CUDA takes them, for a GPU's step traced on the CPU (issue 39).

Some of torch's ``CompositeImplicitAutograd`` ops read the input's device and run other ops on
CUDA than on the CPU; a CPU trace of a GPU's step must follow CUDA's branch, as it follows CUDA's
fused RMSNorm (scenarios/stack/cuda_rms_norm.py) and autocast lists (measure/cuda_autocast.py):

- ``dropout`` (aten/src/ATen/native/Dropout.cpp, torch 2.11): ``if (train &&
  is_fused_kernel_acceptable(input, p)) return std::get<0>(at::native_dropout(input, p, train));``
  where ``is_fused_kernel_acceptable`` is ``(input.is_cuda() || input.is_xpu() || input.is_lazy()
  || input.is_privateuseone()) && p > 0 && p < 1 && input.sym_numel() > 0``. Elsewhere the
  composite ``_dropout_impl`` runs: ``noise = at::empty_like(input)``, ``noise.bernoulli_(1 - p)``,
  ``noise.div_(1 - p)``, ``input * noise``, and autograd's ``mul`` saves ``noise``, a tensor of the
  input's dtype. On CUDA autograd saves ``native_dropout``'s mask instead (derivatives.yaml:
  ``native_dropout_backward(grad, result1, scale)``), one byte an element (``dropout_cuda<bool>``,
  aten/src/ATen/native/cuda/Dropout.cu): for a float32 (B, h, n, n) of attention weights, a quarter
  of the noise the CPU keeps, and one fused kernel each way instead of four ops. The CPU build has
  ``native_dropout`` too (``native_dropout_cpu``, a bool mask as well), so the branch runs as is on
  real CPU tensors (a small point) and on fake ones (its meta function).
- ``scaled_dot_product_attention`` with ``dropout_p > 0``: CUDA's fused kernels take dropout
  (cuda/sdp_utils.cpp: no dropout check for flash and memory-efficient attention; cuDNN's are in
  memmodel/sdpa_choice.py), the CPU's flash kernel does not (sdp_utils_cpp.cpp
  ``use_flash_attention_cpp``: ``check_for_dropout``), so the CPU runs the math path and its
  (B, h, n, n) weights. While fused backends are enabled (``torch.backends.cuda.flash_sdp_enabled()``,
  the flag the CPU's choice reads too), the call runs with ``dropout_p = 0``: the trace records
  the fused op, whose allocations the GPU memory model replaces by the chosen backend's, with
  dropout (memmodel/sdpa_kernels.py: flash's second RNG state, no split-KV). Its values have no
  dropout: a prediction's are never used. With the math path forced (the trace of a GPU that
  runs it), dropout stays, and the math path's ``at::dropout`` takes the branch above.

- ``scaled_dot_product_attention`` that CUDA's composite (attention.cpp, torch 2.11) sends to flash:
  ``pad_last_dim<8, false>`` pads q, k and v whose head dim is not a multiple of 8 with zeros
  (``at::pad``: ``constant_pad_nd``, a copy each, which flash saves for backward), flash runs on
  them with the unpadded query's scale (``sdp::calculate_scale``), and ``post_process_flash_output``
  slices the output back (a view of the padded output). Autograd then runs ``slice_backward`` (a
  padded zero gradient) before flash's backward and a ``constant_pad_nd`` back (a clone) after it.
  The CPU pads nothing ("For the CPU case we do not need to pad the last dim"). The branch is
  taken where flash is the only fused kernel that can run the call on a GPU: fp16/bf16 with no
  mask, equal head dims <= 256, one of them not a multiple of 8 (cuDNN wants multiples of 8,
  memory-efficient attention multiples of 8 in half precision on every GPU attnprof knows: memmodel/
  sdpa_choice.py), while flash is enabled; a GPU that runs the math path instead is traced with
  the math path forced, which pads nothing.

``cuda_branches()`` registers, while entered, a Python kernel on the AutogradCPU key of each op
above that takes CUDA's branch (the whole op as Dropout.cpp runs it on a CUDA tensor), and
removes it on exit: the C++ composite is back. The registration is the process's: one thread at
a time holds it, and while it is held every CPU ``dropout`` and SDPA call in the process takes
CUDA's branch, another thread's too (attnprof traces in one thread).

What the GPU model does not see: the dropout of a plug-in's SDPA call is read from its variant's
``dropout`` option (memmodel/gpu_peak.py ``sdpa_dropout``), not from the call; the GPU time model
prices SDPA's fused row without an RNG cost, and on the math path without the dropout kernels.
"""

from __future__ import annotations

import math

import torch

from attnprof.profiler.measure.held_kernels import HeldKernels


def fused_dropout_acceptable(x: torch.Tensor, p: float) -> bool:
    """Dropout.cpp ``is_fused_kernel_acceptable`` for a CUDA tensor of ``x``'s size: 0 < p < 1, not empty."""
    return 0 < p < 1 and x.numel() > 0


def _dropout(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """Dropout.cpp ``dropout`` on a CUDA tensor: the fused kernel, else ``_dropout_impl``'s early
    returns (no other case reaches its noise on CUDA)."""
    if not 0 <= p <= 1:  # _dropout_impl's TORCH_CHECK
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    if train and fused_dropout_acceptable(x, p):
        return torch.ops.aten.native_dropout(x, p, train)[0]  # output; result1 (a bool mask) saved by autograd
    if p == 0 or not train or x.numel() == 0:
        return x  # ``return input``
    return x * torch.zeros((), dtype=x.dtype, device=x.device)  # p == 1: ``multiply(input, at::zeros({}))``


FLASH_HEAD_ALIGN = 8  # attention.cpp: pad_last_dim<8, false> before _scaled_dot_product_flash_attention


def flash_pads(q, k, v, attn_mask=None) -> bool:
    """Whether CUDA's SDPA composite pads this call's head dims for flash (see above): fp16/bf16, no
    mask, equal head dims <= 256 of which one is not a multiple of 8, flash enabled."""
    dims = {t.size(-1) for t in (q, k, v)}
    return (attn_mask is None and q.dtype in (torch.float16, torch.bfloat16) and len(dims) == 1
            and q.size(-1) <= 256 and q.size(-1) % FLASH_HEAD_ALIGN != 0
            and torch.backends.cuda.flash_sdp_enabled())


def _pad_last_dim(t: torch.Tensor) -> torch.Tensor:
    """attention.cpp ``pad_last_dim<8, false>``: ``at::pad(t, {0, pad_count})``, zeros (constant_pad_nd)."""
    short = t.size(-1) % FLASH_HEAD_ALIGN
    return t if short == 0 else torch.ops.aten.constant_pad_nd(t, [0, FLASH_HEAD_ALIGN - short], 0.0)


def _composite(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    out = torch.ops.aten.scaled_dot_product_attention.default.decompose(  # torch's composite (C++)
        q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if out is NotImplemented:  # a torch whose SDPA has no CompositeImplicitAutograd kernel
        raise RuntimeError("scaled_dot_product_attention has no composite kernel in this torch")
    return out


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """SDPA as a GPU's fused kernel sees it: its dropout left to the GPU model, a head dim flash
    takes padded to a multiple of 8 (see above)."""
    if dropout_p > 0 and torch.backends.cuda.flash_sdp_enabled():
        dropout_p = 0.0
    if not flash_pads(q, k, v, attn_mask):
        return _composite(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    head_dim = q.size(-1)
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)  # sdp::calculate_scale(query_, scale)
    out = _composite(_pad_last_dim(q), _pad_last_dim(k), _pad_last_dim(v), None, dropout_p, is_causal, scale,
                     enable_gqa)  # (B, h, n, head_dim rounded up to 8)
    return torch.ops.aten.slice(out, -1, 0, head_dim)  # post_process_flash_output: (B, h, n, head_dim), a view


KERNELS = {"dropout": _dropout, "scaled_dot_product_attention": _sdpa}  # aten op -> its CUDA branch


def _register(lib: torch.library.Library) -> None:
    for name, kernel in KERNELS.items():
        lib.impl(name, kernel, "AutogradCPU")  # before the composite (an alias key's kernel)


_HELD = HeldKernels(_register)


def cuda_branches():
    """While entered, the ops of ``KERNELS`` called on CPU tensors take CUDA's branch (see above)."""
    return _HELD.held()
