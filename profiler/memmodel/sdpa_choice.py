"""Which SDPA backend a GPU runs for attnprof's calls: torch's own selection rules.

``F.scaled_dot_product_attention`` on CUDA (aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp, ``select_sdp_backend``) walks a priority order and takes the first
backend whose checks pass, math last. What this module reads from the running torch,
rather than assuming:

- the **priority order**: ``torch._C._get_sdp_priority_order()`` (the order
  ``sdpa_kernel(..., set_priority=True)`` and torch's default set; flash, efficient,
  math, cudnn on torch 2.11 and 2.13), where this torch exposes it;
- the **enabled backends**: ``torch.backends.cuda.{flash,mem_efficient,cudnn,math}_sdp_enabled()``;
- the **cuDNN version**: ``torch.backends.cudnn.version()`` where this torch has cuDNN;
  on a CPU build, the cuDNN that torch's CUDA wheels install (ASSUMED_CUDNN).

The rule that depends on the torch version, ``check_prefer_cudnn_attention`` (run once,
on the first CUDA dispatch, it moves cuDNN to the front of the order):

- torch >= 2.9 (read in the 2.13 source): cuDNN newer than 9.15 on compute capability
  9.0, 9.3, 10.0 or 10.3, unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set;
- older torch (2.5-2.8 sources): cuDNN >= 9.9 on capability 9.0 or 10.0, unless
  TORCH_CUDNN_SDPA_PREFERRED=0.

Grouped KV heads (issue 24: SDPA called with ``enable_gqa`` and fewer K/V heads): flash
admits them (``check_batch_size_and_num_heads_dense<true>`` in every source read); the
memory-efficient kernel refuses them in the 2.5-2.9 sources (``<false>``) and admits them in
later ones, and cuDNN's head-count rule changed between releases too: neither is modelled
for grouped heads here (refused, with that reason), so such a point gets flash or math.

docs/gpu.md repeats this. A CUDA sweep records the backend torch actually ran
(``gpu_sdpa_backend_measured``, profiler/gpumeasure/sdpa_spy.py), so the rule is checked on
every GPU the project is lent (scripts/gpu_check.sh).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

from attnprof.profiler.hardware.gpus import GpuSpec

BACKENDS = ("flash", "efficient", "cudnn", "math")
BACKEND_ENV = "ATTNPROF_SDPA_BACKEND"  # force one backend (validation against a GPU run)
HALF = ("float16", "bfloat16")
# torch's SDPBackend enum values (torch/nn/attention/__init__.py): math 0, flash 1, efficient 2, cudnn 3
_ENUM = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
DEFAULT_ORDER = ("flash", "efficient", "math", "cudnn")  # at::Context's default (ATen/Context.h)
# nvidia-cudnn-cu13 9.19.0.56: what `pip install torch==2.11.0` (+cu130) installs (seen here, 2026-12)
ASSUMED_CUDNN = 91900
_TRUE = ("1", "true", "on", "yes", "y")


@dataclass(frozen=True)
class SdpaChoice:
    backend: str  # one of BACKENDS
    reason: str  # why, one line


def torch_facts() -> dict:
    """The running torch's order, enabled backends and cuDNN version (see the module docstring)."""
    import torch

    order = list(DEFAULT_ORDER)
    read = getattr(torch._C, "_get_sdp_priority_order", None)
    if read is not None:
        try:
            order = [_ENUM[int(b)] for b in read() if int(b) in _ENUM and _ENUM[int(b)] in BACKENDS]
        except (TypeError, ValueError, RuntimeError):
            order = list(DEFAULT_ORDER)
    cuda = torch.backends.cuda
    enabled = {name: bool(getattr(cuda, fn, lambda: True)()) for name, fn in (
        ("flash", "flash_sdp_enabled"), ("efficient", "mem_efficient_sdp_enabled"),
        ("cudnn", "cudnn_sdp_enabled"), ("math", "math_sdp_enabled"))}
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - a broken cuDNN install: assume the wheel's
        cudnn = None
    return {"order": order, "enabled": enabled, "cudnn": cudnn or ASSUMED_CUDNN, "cudnn_assumed": not cudnn,
            "torch": tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])}


def prefers_cudnn(gpu: GpuSpec, cudnn_version: Optional[int] = None, torch_version: Optional[tuple] = None) -> bool:
    """sdp_utils.cpp ``check_prefer_cudnn_attention``, by torch version (module docstring)."""
    facts = torch_facts() if cudnn_version is None or torch_version is None else {}
    cudnn = cudnn_version if cudnn_version is not None else facts["cudnn"]
    version = torch_version if torch_version is not None else facts["torch"]
    major, minor = gpu.compute_capability
    if version >= (2, 9):
        if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "").lower() in _TRUE:
            return False
        return cudnn > 91500 and major in (9, 10) and minor in (0, 3)
    if os.environ.get("TORCH_CUDNN_SDPA_PREFERRED", "").lower() in ("0", "false", "off", "no", "n"):
        return False
    return cudnn >= 90900 and major in (9, 10) and minor == 0


def priority_order(gpu: GpuSpec, facts: Optional[dict] = None) -> list:
    """The backends in the order this GPU's torch would try them, disabled ones left out."""
    facts = facts or torch_facts()
    order = [b for b in facts["order"] if b in BACKENDS]
    if prefers_cudnn(gpu, facts["cudnn"], facts["torch"]):
        order = ["cudnn"] + [b for b in order if b != "cudnn"]
    return [b for b in order if facts["enabled"].get(b, True)]


def cudnn_dropout_problem(dropout: float, cudnn_version: int) -> Optional[str]:
    """Why cuDNN attention refuses this dropout, or None (issue 39; cuda/sdp_utils.cpp as read on
    pytorch main, late 2025, not pinned to 2.11): ``can_use_cudnn_attention`` refuses any dropout on
    cuDNN 9.11-9.13 (``cudnn_version > 91100 && cudnn_version < 91400``), and
    ``check_cudnn_dropout`` a probability that is not a multiple of 1/16 ("cuDNN dropout
    probability resolution is limited to 1/16")."""
    if dropout > 0 and 91100 < cudnn_version < 91400:
        return f"cuDNN {cudnn_version} attention takes no dropout (9.11-9.13)"
    if dropout * 16 != math.floor(dropout * 16):
        return f"cuDNN attention's dropout resolution is 1/16: {dropout:g} is not a multiple of it"
    return None


def choose_sdpa_backend(gpu: GpuSpec, dtype: str, head_dim: int, head_dim_v: Optional[int] = None,
                        requires_grad: bool = True, forced: Optional[str] = None,
                        facts: Optional[dict] = None, grouped_kv: bool = False, dropout: float = 0.0) -> SdpaChoice:
    """sdp_utils.cpp ``select_sdp_backend`` for attnprof's SDPA calls (dense 4-D, no mask): the
    first backend of ``priority_order`` whose checks pass. ``grouped_kv``: k and v have fewer
    heads than q (enable_gqa; module docstring). ``dropout``: the call's dropout_p (issue 39),
    which flash and memory-efficient attention take as they are and cuDNN only as below."""
    forced = forced if forced is not None else (os.environ.get(BACKEND_ENV) or None)
    if forced:
        if forced not in BACKENDS:
            from attnprof.errors import UserError

            raise UserError(f"{BACKEND_ENV}={forced!r}; choose one of {', '.join(BACKENDS)}")
        return SdpaChoice(forced, f"forced by {BACKEND_ENV}")
    dv = head_dim if head_dim_v is None else head_dim_v
    cc = gpu.compute_capability
    half = dtype in HALF

    def cudnn() -> Optional[str]:  # check_cudnn_* (shape, dtype, layout), conservatively
        if not half or cc < (8, 0):
            return "cuDNN attention needs fp16/bf16 on sm80+"
        if head_dim != dv or head_dim % 8 or head_dim > 128:
            return "cuDNN attention: head_dim must be equal for q/k/v, a multiple of 8 and <= 128"
        return cudnn_dropout_problem(dropout, facts["cudnn"])

    def flash() -> Optional[str]:  # use_flash_attention: check_flash_attention_hardware_support, head dims
        if not half:
            return f"FlashAttention needs fp16/bf16, not {dtype}"
        if cc < (8, 0):
            return f"FlashAttention needs sm80+, this GPU is sm{cc[0]}{cc[1]}"
        if head_dim != dv or head_dim > 256:
            return "FlashAttention needs equal q/k/v head dims <= 256"
        # check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89: head dims in (192, 224], or
        # above 224 with dropout, have no backward kernel there (later torch adds sm120/121: none in the table)
        if requires_grad and cc in ((8, 6), (8, 9)) and (192 < head_dim <= 224 or (head_dim > 224 and dropout > 0)):
            return ("FlashAttention backward on sm86/sm89 takes no head_dim in (192, 224], nor above 224 "
                    "with dropout")
        return None

    def efficient() -> Optional[str]:  # use_mem_efficient_attention: dtype, minimum_gemm_alignment
        if dtype not in ("float32", *HALF) or (dtype == "bfloat16" and cc < (8, 0)) or cc < (5, 0):
            return f"memory-efficient attention does not take {dtype} on sm{cc[0]}{cc[1]}"
        align = (8 if half else 4) if cc >= (8, 0) else (8 if half else 1)
        if head_dim % align or dv % align:
            return f"memory-efficient attention needs head dims divisible by {align}"
        return None

    # --- issue 24: grouped KV heads (module docstring) ---
    def grouped(check, name):
        def run() -> Optional[str]:
            if grouped_kv:
                return f"{name} with grouped KV heads (enable_gqa): its rule differs across torch releases, not modelled"
            return check()
        return run

    checks = {"cudnn": grouped(cudnn, "cuDNN attention"), "flash": flash,
              "efficient": grouped(efficient, "memory-efficient attention")}
    facts = facts or torch_facts()
    reasons = []
    for name in priority_order(gpu, facts):
        if name == "math":
            break  # math always passes: anything after it is never tried
        problem = checks[name]()
        if problem is None:
            first = "cuDNN preferred on this GPU (check_prefer_cudnn_attention); " if name == "cudnn" else ""
            return SdpaChoice(name, (first + "; ".join(reasons)).strip("; ") or f"{name}: first in priority order")
        reasons.append(problem)
    return SdpaChoice("math", "; ".join(reasons) or "math first in the priority order")
