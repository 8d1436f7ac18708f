"""Predicted step time from per-op costs: a roofline per kernel and the cost of launching it.

For each pass (forward, backward) separately::

    kernel(op) = max(flops / (peak[dtype] x eff_class),
                     (bytes_read + bytes_written) / (bandwidth x eff_bw[class]))
    CPU:  time = sum over ops of count x kernel(op)  +  kernels x overhead
    GPU:  time = sum over ops of count x max(kernel(op), kernels(op) x launch)

On the CPU the host runs the kernels, so each op's dispatch cost adds to it. A GPU runs them
apart from the host that launches them (asynchronously): a kernel longer than its launch
hides it, a shorter one leaves the GPU waiting for the host (``Rates.asynchronous``). On a
GPU some ops also run more kernels and move more bytes than their row says
(``cuda_kernels.extra_traffic``: masked_fill's clone, softmax backward's ``grad * output``,
logsumexp's nine kernels, a pad's or a slice gradient's fill before the copy).

The op rows are ``Accounting.op_costs`` (profiler/measure/accounting.py): per aten op of the
whole composed step, its FLOPs (torch's flop-counter formulas), the bytes of its distinct
input and output tensors, and how often it runs. Each op is one kernel of the class
``op_classes.kernel_class`` gives it; a view runs no kernel and costs nothing. A kernel is
compute-bound or memory-bound, whichever takes longer; kernels run one after another
(eager PyTorch, one stream), so their times add up.

A GEMM's compute rate depends on its inner dimension K (``gemm_inner_dim``, read off its
row): on this CPU a thin GEMM (attention's QK^T, K = head_dim) runs far below the square
rate; a GPU keeps one GEMM efficiency, its thin GEMMs being bound by the memory term.

``Rates`` (rates.py) says what the device does: on this CPU, measured by ``attnprof
calibrate`` (GEMM rate per dtype and by K, fused-attention rate, copy bandwidth and each
memory-bound class's rate, per-op cost);
on a named GPU, datasheet peaks times cited efficiency constants (constants.py).
Fused scaled-dot-product attention is one kernel on both, costed at the fused kernel's
efficiency for the backend the device would pick: the CPU's flash kernel, or on a GPU
FlashAttention-2, memory-efficient or cuDNN attention. Where a GPU would fall back to
SDPA's math path, the op is costed as that path's kernels instead: two batched GEMMs and
a softmax that write and read the n x n scores (``_math_attention``).

What it leaves out, on purpose: the order of the ops (rows are aggregated, so a host that
ran ahead during a long kernel is not credited to the short ones after it), cache effects
(every byte goes to DRAM/HBM), wave quantisation and tile shapes of small GEMMs, kernels
that keep too little in flight to reach the streaming bandwidth (the softmax forward over
long rows on an H200: docs/time-model.md), and the Python work outside aten ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.aten_ops import op_base
from attnprof.profiler.records import DTYPE_BYTES
from attnprof.profiler.timemodel.cuda_kernels import extra_traffic
from attnprof.profiler.timemodel.op_classes import CLASSES, is_attention_backward, kernel_class
from attnprof.profiler.timemodel.rates import Rates

PASSES = ("fwd", "bwd")
# SDPA's math path per fused op: kernels it launches and passes over the n x n scores
# (forward: QK^T writes S, softmax reads S and writes P, PV reads P; backward, autograd of
# the same: two GEMMs read P, dP is written, softmax backward reads P and dP and writes dS,
# two GEMMs read dS).
MATH_KERNELS = {"fwd": 4, "bwd": 7}  # + scaling of q: one elementwise kernel forward, one backward
MATH_SCORE_PASSES = {"fwd": 4, "bwd": 7}
# GEMMs whose row tells their inner dimension: one M x N output (per batch), 2 M N K FLOPs.
K_FROM_ROW = frozenset({"mm", "bmm", "addmm", "baddbmm"})


def gemm_inner_dim(op: Optional[str], flops: float, bytes_written: float, dtype: str) -> Optional[float]:
    """K of a matmul row: it writes its b x M x N output once and does 2 b M N K FLOPs, so
    K = flops x element_bytes / (2 x bytes_written). None for other ops, or no output."""
    if op is None or op_base(str(op)) not in K_FROM_ROW or not flops or not bytes_written:
        return None
    return flops * DTYPE_BYTES[dtype] / (2 * bytes_written)


@dataclass
class TimePrediction:
    time_fwd_ms: float
    time_bwd_ms: Optional[float]  # None: no backward rows (a forward-only point)
    kernels_fwd: int
    kernels_bwd: int
    # kernel class -> ms, both passes; "overhead": the launch cost added (CPU) or waited for (GPU)
    by_class_ms: dict = field(default_factory=dict)
    device: str = ""

    @property
    def time_ms(self) -> float:
        return self.time_fwd_ms + (self.time_bwd_ms or 0.0)


def kernel_seconds(flops: float, nbytes: float, peak_flops_per_s: float, efficiency: float,
                   bytes_per_s: float) -> float:
    """One kernel's roofline time: the slower of its compute and its memory traffic."""
    compute = flops / (peak_flops_per_s * efficiency) if flops else 0.0
    return max(compute, nbytes / bytes_per_s)


def _math_attention(flops: int, nbytes: int, dtype: str, head_dim: int, backward: bool, rates: Rates,
                    peak: float) -> tuple[float, int]:
    """(seconds, kernels) of one SDPA op on the math path. The forward counts 4 x B x H x
    nq x nk x d FLOPs (torch's formula), so the scores hold flops / (4 d) elements
    (backward: flops / (10 d), its formula being 2.5 x the forward's)."""
    pass_ = "bwd" if backward else "fwd"
    scores = flops / ((10 if backward else 4) * head_dim)
    score_bytes = scores * DTYPE_BYTES[dtype] * MATH_SCORE_PASSES[pass_]
    gemm = kernel_seconds(flops, nbytes, peak, rates.gemm_efficiency, rates.bandwidth("gemm"))
    return gemm + score_bytes / rates.bandwidth("reduction"), MATH_KERNELS[pass_]


def _op_cost(op, flops, read, written, rates: Rates, dtype: str, head_dim: Optional[int],
             peak: Optional[float]) -> Optional[tuple]:
    """(seconds, kernels launched, kernel class) of one op, its launch overhead left out;
    None when it cannot be predicted (FLOPs and no peak for the dtype; the math path and
    no head_dim). A view: (0.0, 0, "view")."""
    cls = kernel_class(op)
    if cls == "view":
        return 0.0, 0, cls
    nbytes = read + written
    if flops and peak is None:
        return None
    base = op_base(str(op)) if op else ""
    extra_kernels = 0
    if rates.asynchronous:  # a GPU: composites below the dispatcher run more kernels than traced
        extra_kernels, extra_bytes = extra_traffic(op, read, written)
        nbytes += extra_bytes
    if cls == "attention" and rates.sdpa_backend == "math":
        if not head_dim:
            return None
        one, launched = _math_attention(flops, nbytes, dtype, head_dim, is_attention_backward(op), rates, peak)
    elif cls == "attention":
        eff = rates.attention(dtype, is_attention_backward(op), head_dim)
        one, launched = kernel_seconds(flops, nbytes, peak, eff, rates.bandwidth(cls)), 1
    elif cls == "gemm":
        rate = rates.gemm_flops_per_s(dtype, gemm_inner_dim(op, flops, written, dtype))
        one, launched = kernel_seconds(flops, nbytes, rate or 1.0, 1.0, rates.bandwidth(cls)), 1
    else:
        one, launched = kernel_seconds(flops, nbytes, peak or 1.0, 1.0, rates.op_bandwidth(base, cls)), 1
    if not base.endswith("_"):  # an in-place op writes into memory it already has
        one += rates.fresh_output_s(written)
    return one, launched + extra_kernels, cls


def with_launch_s(one: float, launched: int, rates: Rates, backward: bool) -> float:
    """An op's time with its kernels' launch cost: added on the CPU (the host runs them), a
    floor on a GPU (launched asynchronously: the GPU waits only when the kernels are shorter
    than their launches)."""
    launch = launched * rates.overhead_s(backward)
    return max(one, launch) if rates.asynchronous else one + launch


def op_time_s(pass_: str, op, flops: int, read: int, written: int, rates: Rates, dtype: str,
              head_dim: Optional[int] = None) -> Optional[float]:
    """The modelled time of ONE op (a row of ``op_costs`` with count 1), its kernels' launch
    overhead included: ``predict_time`` of a step is the sum of these over its ops (the
    timeline, profiler/timeline/, lays them end to end). None where predict_time is None."""
    cost = _op_cost(op, flops, read, written, rates, dtype, head_dim, rates.peak(dtype))
    if cost is None:
        return None
    one, launched, _ = cost
    return with_launch_s(one, launched, rates, pass_ == "bwd")


def predict_time(op_costs: list, rates: Optional[Rates], dtype: str,
                 head_dim: Optional[int] = None) -> Optional[TimePrediction]:
    """The step time of a point on ``rates``' device from its op rows; None when it cannot
    be predicted (no rates, no rows, or no peak for the dtype on that device): never a guess.
    ``head_dim`` is needed only where SDPA would take the math path on a GPU."""
    if rates is None or not op_costs:
        return None
    peak = rates.peak(dtype)
    seconds = {p: 0.0 for p in PASSES}
    kernels = {p: 0 for p in PASSES}
    overhead = {p: 0.0 for p in PASSES}  # launch cost added (CPU) or waited for (GPU)
    by_class = dict.fromkeys(CLASSES, 0.0)
    for row in op_costs:
        pass_, op, flops, read, written, count = row
        cost = _op_cost(op, flops, read, written, rates, dtype, head_dim, peak)
        if cost is None:
            return None
        one, launched, cls = cost
        if cls == "view":
            continue
        seconds[pass_] += one * count
        kernels[pass_] += launched * count
        overhead[pass_] += (with_launch_s(one, launched, rates, pass_ == "bwd") - one) * count
        by_class[cls] += one * count * 1e3
    by_class["overhead"] = (overhead["fwd"] + overhead["bwd"]) * 1e3
    has_bwd = any(row[0] == "bwd" for row in op_costs)
    return TimePrediction(time_fwd_ms=(seconds["fwd"] + overhead["fwd"]) * 1e3,
                          time_bwd_ms=(seconds["bwd"] + overhead["bwd"]) * 1e3 if has_bwd else None,
                          kernels_fwd=kernels["fwd"], kernels_bwd=kernels["bwd"],
                          by_class_ms={k: v for k, v in by_class.items() if v}, device=rates.device)
