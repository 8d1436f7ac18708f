"""torch.autocast as CUDA casts, for a GPU's mixed-precision step traced on the CPU (issue 39).

A trace runs ``torch.autocast("cpu")``, whose op lists are the CPU's. CUDA's differ: it runs
``softmax``, ``log_softmax``, ``sum``, ``cumsum`` in float32 (``fp32_set_opt_dtype``: the op's
optional dtype set to float32), ``exp``, ``log``, ``rsqrt``, ``pow``, ``layer_norm``, ``rms_norm``,
``logsumexp`` and the losses in float32 (``fp32``: their inputs cast up), the matmuls, ``linear``,
``einsum`` and SDPA in the autocast dtype (``lower_precision_fp``), and ``addcmul``, ``index_put``,
``scatter_add``... in the widest input dtype (``promote``). So a materialised attention's softmax
makes a float32 (B, h, n, n) on CUDA, and the next matmul a low-precision copy of it, where the
CPU's autocast leaves the bfloat16 scores alone: for ``full`` under amp-bf16 several times the
CPU trace's attention memory.

``cuda_autocast()`` makes the CPU's autocast follow CUDA's lists while it is entered: it
registers, on the AutocastCPU dispatch key of every op either device's autocast names, a Python
kernel that applies CUDA's policy (or none, for an op only the CPU's lists name), and removes
them all on exit (the C++ kernels are back). Each kernel does what ``WrapFunction`` does in
aten/src/ATen/autocast_mode.h / .cpp (torch 2.11): ``cached_cast`` of each eligible argument (a
floating, non-float64 tensor, or a list of them) with autocast's weight cache (a float32 leaf
that requires grad, cast to the low-precision dtype, is cast once per autocast region; the cache
is dropped when the outermost region exits, as ``torch.clear_autocast_cache`` drops torch's),
``set_opt_dtype`` (the first tensor argument eligible: a missing dtype becomes float32),
``promote_type`` (float32 if any eligible argument is, else the low-precision dtype), or
``fp32_append_dtype`` (``norm``: its dtype overload with float32, the arguments the dispatcher left
out at their defaults). One device branch below autocast is followed too: ``softmax`` and
``log_softmax`` of a CUDA float16 input with dtype float32 run ``_softmax(x, dim, half_to_float=True)``
(aten/src/ATen/native/SoftMax.cpp), with no float32 copy of the input; the CPU's kernel refuses that
flag, so such a point is predicted on fake tensors only (predict/fake_run.small_point).

The policies are torch's lists (autocast_mode.h's AT_FORALL_* macros and autocast_mode.cpp's CUDA
registrations); which ops the running torch registers for AutocastCUDA is read from the
dispatcher (``cuda_policy_ops``: an op the running torch does not list for CUDA keeps no policy), and tests/profiler/measure/test_cuda_autocast.py holds every listed op to the
binary's own AutocastCUDA kernel, run on fake CUDA tensors (a forward needs no GPU).
"""

from __future__ import annotations

import contextlib
import warnings
import weakref

import torch

from attnprof.profiler.measure.held_kernels import HeldKernels

LOWER, FP32, SET_OPT_DTYPE, APPEND_DTYPE, PROMOTE, BANNED = (
    "lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")

# aten op name (name.overload, or name for the default overload) -> CUDA's policy (torch 2.11)
POLICIES: dict = {}
for _policy, _names in (
    (LOWER, "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
            "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul einsum mm mv "
            "linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell "
            "_thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention "
            "scaled_dot_product_attention cudnn_convolution cudnn_convolution_transpose"),
    (FP32, "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
           "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm group_norm frobenius_norm.dim "
           "nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss "
           "nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
           "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
           "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d "
           "_upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
           "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
           "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa rms_norm"),
    (SET_OPT_DTYPE, "prod prod.dim_int prod.dim_Dimname softmax.int softmax.Dimname log_softmax.int "
                    "log_softmax.Dimname cumprod cumprod.dimname cumsum cumsum.dimname linalg_vector_norm "
                    "linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList sum.dim_DimnameList"),
    (APPEND_DTYPE, "norm.Scalar norm.ScalarOpt_dim norm.names_ScalarOpt_dim"),
    (PROMOTE, "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"),
    (BANNED, "binary_cross_entropy"),
):
    POLICIES.update(dict.fromkeys(_names.split(), _policy))
# registered on CUDA's autocast key by a CUDA build with cuDNN, not emulated: op -> why
NOT_EMULATED = {"_cudnn_rnn": "cuDNN RNN's own autocast wrapper (aten/src/ATen/cudnn/AutocastRNN.cpp); attnprof runs no RNN"}
# fp32_append_dtype: the overload each redispatches to, with a trailing dtype
_APPENDED = {"norm.Scalar": "ScalarOpt_dtype", "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
             "norm.names_ScalarOpt_dim": "names_ScalarOpt_dim_dtype"}
_HALF_TO_FLOAT = {"softmax.int": torch.ops.aten._softmax.default,
                  "log_softmax.int": torch.ops.aten._log_softmax.default}
BANNED_MESSAGE = ("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast. Many "
                  "models use a sigmoid layer right before the binary cross entropy layer. In this case, combine the "
                  "two layers using torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss.")

_KEY = torch._C.DispatchKey.AutocastCPU
_state = {"cache": {}}  # the weight cache, the process's as the registration is (held_kernels.py)


def _op(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _eligible(t) -> bool:
    """autocast's is_eligible, the device aside (every tensor of a traced GPU step stands for a CUDA
    one): a floating tensor that is not float64."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cached_cast(to: torch.dtype, arg, lower: torch.dtype):
    if isinstance(arg, (list, tuple)):
        return type(arg)(_cached_cast(to, a, lower) for a in arg)
    if not _eligible(arg) or arg.dtype == to:
        return arg
    cacheable = (to == lower and arg.dtype == torch.float32 and arg.requires_grad and arg.is_leaf
                 and not arg._is_view() and torch.is_autocast_cache_enabled()
                 and not torch.is_inference_mode_enabled())  # cached_cast: no cache in inference mode
    if not cacheable:
        return arg.to(to)
    cache = _state["cache"]
    hit = cache.get(id(arg))
    if hit is not None and hit[0]() is arg:
        return hit[1]
    with torch.enable_grad():  # cached_cast makes a cached cast with grad on: a later use needs its grad_fn
        cast = arg.to(to)
    cache[id(arg)] = (weakref.ref(arg), cast)
    return cast


def _tensors(value) -> list:
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return [value] if isinstance(value, torch.Tensor) else []


def _kernel(name: str, policy: str):
    op = _op(name)
    schema = op._schema.arguments

    def run(*args, **kwargs):
        if policy == BANNED:
            raise RuntimeError(BANNED_MESSAGE)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):  # as WrapFunction: the op's
            bound = dict(zip((a.name for a in schema), args))
            bound.update(kwargs)
            lower = torch.get_autocast_dtype("cpu")
            tensors = [t for a in schema if a.name in bound for t in _tensors(bound[a.name])]
            first_ok = bool(tensors) and _eligible(tensors[0])
            if policy in (LOWER, FP32, PROMOTE):
                to = lower if policy == LOWER else torch.float32
                if policy == PROMOTE:  # prioritize(): Tensor and Tensor[] arguments, not optional ones
                    counted = [t for a in schema if a.name in bound and not isinstance(a.type, torch._C.OptionalType)
                               for t in _tensors(bound[a.name])]
                    to = torch.float32 if any(_eligible(t) and t.dtype == torch.float32 for t in counted) else lower
                bound = {k: _cached_cast(to, v, lower) for k, v in bound.items()}
            elif policy == SET_OPT_DTYPE and first_ok and "dtype" in (a.name for a in schema):
                if bound.get("dtype") is None:
                    bound["dtype"] = torch.float32
                    x = tensors[0]
                    if x.dtype == torch.float16 and name in _HALF_TO_FLOAT:
                        # softmax / log_softmax (SoftMax.cpp): a CUDA half input with dtype float is
                        # _softmax(x, dim, half_to_float=True): no float32 copy of the input
                        return _HALF_TO_FLOAT[name](x, bound["dim"], True)
            elif policy == APPEND_DTYPE and first_ok:
                target = getattr(getattr(torch.ops.aten, "norm"), _APPENDED[name])
                values = [bound[a.name] if a.name in bound else a.default_value for a in schema]  # (the dispatcher
                return target(*values, dtype=torch.float32)  # leaves out trailing defaults; the overload needs them)
            positional = [bound[a.name] for a in schema if not a.kwarg_only and a.name in bound]
            keywords = {a.name: bound[a.name] for a in schema if a.kwarg_only and a.name in bound}
            return op(*positional, **keywords)

    return run


def registered(key: str) -> set:
    """The aten ops (name.overload, or name) the running torch registers a kernel for on ``key``."""
    return {n.split("::", 1)[1] for n in torch._C._dispatch_get_registrations_for_dispatch_key(key)
            if n.startswith("aten::")}


def cuda_policy_ops() -> dict:
    """Every op whose AutocastCPU kernel the context replaces: name -> CUDA's policy, None for an
    op the CPU's lists name and the running torch's CUDA lists do not (run as called). The CUDA
    lists are the ones this torch registers on AutocastCUDA (every build has them, a CPU build
    too), each with its policy from ``POLICIES``: they change across releases (``rms_norm`` is
    float32 on CUDA in torch 2.13 and not listed in 2.11, whose CUDA build runs the fused kernel on
    the input as it comes)."""
    cuda = registered("AutocastCUDA")
    out = {name: None for name in sorted(registered("AutocastCPU")) if name not in cuda or name not in POLICIES}
    out.update({name: policy for name, policy in POLICIES.items() if name in cuda})
    return out


def _register(lib: torch.library.Library) -> None:
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": the point
        warnings.simplefilter("ignore", UserWarning)
        for name, policy in cuda_policy_ops().items():
            # an op only the CPU's lists name falls through, as on CUDA: run as called, and the
            # ops it is made of still autocast (a listed op's own ops do not: WrapFunction's guard)
            kernel = torch.library.fallthrough_kernel if policy is None else _kernel(name, policy)
            lib.impl(name, kernel, "AutocastCPU")


_KERNELS = HeldKernels(_register, on_release=_state["cache"].clear)  # the cache goes with the registration


@contextlib.contextmanager
def cuda_autocast():
    """While entered, ``torch.autocast("cpu", ...)`` casts as CUDA's autocast would (see above).
    The registration is the process's: one thread at a time holds the context (another waits), and
    nothing else in the process may run CPU autocast meanwhile (attnprof traces in one thread)."""
    with _KERNELS.held():
        clear = torch.clear_autocast_cache

        def clear_both():  # torch.autocast.__exit__ leaving the outermost region: both caches dropped
            _state["cache"].clear()
            clear()

        torch.clear_autocast_cache = clear_both
        try:
            yield
        finally:
            torch.clear_autocast_cache = clear
