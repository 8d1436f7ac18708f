"""Which kind of kernel an aten op runs: the class decides how the time model costs it.

``kernel_class("mm.default") -> "gemm"``. The classes, and what bounds each one's time:

    gemm                  matrix multiplies (mm, bmm, addmm, ...): compute-bound when large
    attention             fused scaled-dot-product attention (one kernel for the whole core)
    elementwise           pointwise math, comparisons, fills, random numbers: bandwidth-bound
    reduction             sums, norms, softmax, layer norm, argmax: bandwidth-bound
    gather_scatter_sort   indexed reads and writes, sorting: bandwidth-bound, less efficiently
    copy                  data movement only (clone, cat, contiguous copies, padding, roll)
    view                  no kernel runs: views, aliases, detach, empty allocations (free)

An op that is in no list is costed as ``elementwise`` (one kernel streaming its inputs
and outputs once): the most common kind of op, and the one its byte counts describe.
Names are matched on the overload packet (``add`` of ``add.Tensor``), with a trailing
``_`` (in-place) and ``_backward`` suffixes looked up as the op itself where no entry
names them. None (FLOPs without an op event) is a ``gemm``: only matmul-like ops count FLOPs.

The optimizer step (issue 24): a ``_foreach_X`` op is X's class over a list of tensors (one
multi-tensor kernel streaming them all: ``_foreach_sqrt`` elementwise, ``_foreach_norm`` a
reduction); the fused optimizers (``_fused_adamw_``, ``_fused_sgd_``) are one elementwise
kernel over parameters, gradients and states; torch.optim's record-function markers run none.
"""

from __future__ import annotations

from typing import Optional

from attnprof.profiler.aten_ops import GEMM_OPS, op_base

CLASSES = ("gemm", "attention", "elementwise", "reduction", "gather_scatter_sort", "copy", "view")
DEFAULT_CLASS = "elementwise"

GEMM = GEMM_OPS  # matrix multiplies, convolutions (profiler/aten_ops.py: the memory model's cuBLAS ops too)
ATTENTION = frozenset({
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward", "_flash_attention_backward",
    "_efficient_attention_forward", "_efficient_attention_backward"})
REDUCTION = frozenset({
    "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data", "softmax", "log_softmax",
    "logsumexp", "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all", "norm",
    "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "cumsum", "cumprod", "logcumsumexp",
    "native_layer_norm", "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
    "native_batch_norm", "native_batch_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward", "count_nonzero"})
GATHER_SCATTER_SORT = frozenset({
    "gather", "scatter", "scatter_add", "scatter_reduce", "index", "index_select", "index_add", "index_copy",
    "index_put", "_index_put_impl", "index_fill", "take", "take_along_dim", "embedding", "embedding_dense_backward",
    "masked_select", "masked_scatter", "nonzero", "sort", "argsort", "topk", "kthvalue", "msort", "unique",
    "_unique2", "unique_consecutive", "searchsorted", "bucketize", "gather_backward", "select_scatter",
    "slice_scatter", "diagonal_scatter", "as_strided_scatter"})
COPY = frozenset({"clone", "copy", "_to_copy", "contiguous", "cat", "stack", "roll", "constant_pad_nd", "pad",
                  "slice_backward", "select_backward", "diagonal_backward", "repeat", "tile", "flip",
                  "repeat_interleave", "_unsafe_index", "narrow_copy", "unfold_backward", "tril", "triu"})
VIEW = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "alias", "detach", "t", "transpose", "permute", "expand",
    "expand_as", "as_strided", "squeeze", "unsqueeze", "slice", "select", "split", "split_with_sizes", "chunk",
    "unbind", "narrow", "diagonal", "unfold", "lift_fresh", "lift_fresh_copy_", "view_as", "view_as_real",
    "view_as_complex", "movedim", "swapaxes", "_conj", "_neg_view", "real", "imag", "unflatten", "flatten",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_local_scalar_dense", "set_",
    "resize_", "_nested_view_from_buffer", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"})

# Pointwise ops seen in attnprof's variants, named so that ``is_known`` can tell them from an
# op nobody classified (which is costed as elementwise too, but should be looked at).
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "pow", "abs", "clamp", "clamp_min",
    "clamp_max", "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
    "bitwise_not", "logical_and", "logical_or", "logical_not", "remainder", "floor_divide", "fmod", "logaddexp",
    "gelu", "gelu_backward", "relu", "threshold_backward", "silu", "silu_backward", "sigmoid", "sigmoid_backward",
    "tanh", "tanh_backward", "erf", "sin", "cos", "reciprocal", "sign", "floor", "ceil", "round", "arange",
    "randn", "rand", "randint", "normal", "uniform", "bernoulli", "native_dropout", "native_dropout_backward",
    "fill", "zero", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
    "new_full", "scalar_tensor", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "_to_copy_scalar", "isnan"})

# --- issue 24: optimizer ---
FOREACH_PREFIX = "_foreach_"
FUSED_OPTIMIZERS = frozenset({"_fused_adamw", "_fused_adam", "_fused_sgd", "_fused_adagrad"})
ELEMENTWISE = ELEMENTWISE | FUSED_OPTIMIZERS
VIEW = VIEW | {"_record_function_enter_new", "_record_function_exit"}

_TABLE = [(GEMM, "gemm"), (ELEMENTWISE, "elementwise"), (ATTENTION, "attention"), (REDUCTION, "reduction"),
          (GATHER_SCATTER_SORT, "gather_scatter_sort"), (COPY, "copy"), (VIEW, "view")]


def _lookup(base: str) -> Optional[str]:
    if base.startswith(FOREACH_PREFIX):  # the op it applies to each tensor of its lists
        base = base.removeprefix(FOREACH_PREFIX)
    for names, cls in _TABLE:
        if base in names:
            return cls
    return None


def kernel_class(op_name: Optional[str]) -> str:
    """The kernel class of an aten overload name (one of CLASSES)."""
    if op_name is None:
        return "gemm"
    base = op_base(str(op_name))
    for candidate in (base, base.rstrip("_"), base.removesuffix("_backward")):
        found = _lookup(candidate)
        if found is not None:
            return found
    return DEFAULT_CLASS


def is_known(op_name: Optional[str]) -> bool:
    """Whether the op is named in a list here (False: costed as elementwise by default)."""
    if op_name is None:
        return True
    base = op_base(str(op_name))
    return any(_lookup(c) is not None for c in (base, base.rstrip("_"), base.removesuffix("_backward")))


def is_attention_backward(op_name: Optional[str]) -> bool:
    """A fused attention op that computes gradients (costed with the backward kernel's efficiency)."""
    return op_name is not None and "backward" in op_base(str(op_name))
