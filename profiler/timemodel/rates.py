"""What a device can do, as the time model needs it: ``Rates``.

Built either from this machine's calibration (``cpu_rates``: every rate measured, so the
efficiencies are 1 where the measurement already is the achieved rate) or from a GPU
table entry (``gpu_rates``: datasheet peaks times the cited efficiency constants of
``constants.py``). Imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.timemodel import constants as C
from attnprof.profiler.timemodel.calibrate_ops import MMAP_THRESHOLD_BYTES, OP_OF_KERNEL  # imports no torch


@dataclass(frozen=True)
class Rates:
    device: str  # "cpu: AMD EPYC (2 threads)" or a GPU table key such as "h100-sxm"
    kind: str  # "cpu" | "gpu"
    peak_flops_per_s: dict  # dtype -> FLOP/s of a GEMM at efficiency 1 (CPU: measured; GPU: datasheet dense peak)
    bandwidth_bytes_per_s: float  # bytes read + written per second at efficiency 1
    # per kernel in a forward pass (CPU: eager dispatch + autograd recording, added to each op;
    # GPU: the host's launch, a floor under each kernel: ``asynchronous``)
    launch_overhead_s: float
    launch_overhead_bwd_s: float  # per kernel in a backward pass (CPU: autograd engine included)
    gemm_efficiency: float = 1.0  # fraction of peak_flops_per_s a GEMM reaches
    # fused attention: (forward, backward) fraction of peak_flops_per_s[dtype], per dtype;
    # "*" for every dtype not listed
    attention_efficiency: dict = field(default_factory=lambda: {"*": (1.0, 1.0)})
    # (forward, backward) factor on attention_efficiency at head dim 64 and below (1 at 128 and
    # above, log2-linear between): constants.ATTENTION_D64_FACTOR of the backend
    attention_d64_factor: tuple = (1.0, 1.0)
    bandwidth_efficiency: dict = field(default_factory=lambda: {"*": 1.0})  # kernel class -> fraction; "*" default
    # dtype -> {str(K): FLOP/s} of thin GEMMs by inner dimension K (CPU: calibrated; GPU: none,
    # its thin GEMMs are bound by the roofline's memory term); above the largest K the rate
    # runs on to peak_flops_per_s at ``gemm_square_k``
    gemm_k_flops_per_s: dict = field(default_factory=dict)
    gemm_square_k: dict = field(default_factory=dict)  # dtype -> K (= n) of the square GEMM behind the peak
    op_bytes_per_s: dict = field(default_factory=dict)  # aten op (overload packet) -> its own measured bytes/s
    # CPU: an op writing at least fresh_output_bytes gets new pages, faulted in at this rate; 0: no such cost
    fresh_page_bytes_per_s: float = 0.0
    fresh_output_bytes: int = 0
    sdpa_backend: str = "cpu"  # how fused attention runs: cpu | flash | efficient | cudnn | math
    source: tuple = ()  # where each figure comes from, one line each
    notes: tuple = ()

    def peak(self, dtype: str) -> Optional[float]:
        return self.peak_flops_per_s.get(dtype)

    def gemm_flops_per_s(self, dtype: str, k: Optional[float] = None) -> Optional[float]:
        """A GEMM's achieved FLOP/s at inner dimension ``k`` (None: unknown, the square rate):
        the calibrated thin-GEMM rates and the square rate, interpolated linearly in log K,
        clamped at both ends; peak x gemm_efficiency where there is no table (a GPU)."""
        peak = self.peak(dtype)
        if peak is None:
            return None
        table = sorted((float(key), rate) for key, rate in (self.gemm_k_flops_per_s.get(dtype) or {}).items())
        if not table or not k or k <= 0:
            return peak * self.gemm_efficiency
        square_k = float(self.gemm_square_k.get(dtype) or 0)
        if square_k > table[-1][0]:
            table.append((square_k, peak))
        return interpolate_log(table, k) * self.gemm_efficiency

    def attention(self, dtype: str, backward: bool, head_dim: Optional[int] = None) -> float:
        """Fused attention's fraction of the dtype's peak; at a head dim below 128, times the
        backend's published d64/d128 ratio (``attention_d64_factor``, log2-linear from 64 to 128)."""
        pair = self.attention_efficiency.get(dtype, self.attention_efficiency.get("*", (1.0, 1.0)))
        eff = pair[1] if backward else pair[0]
        factor = self.attention_d64_factor[1] if backward else self.attention_d64_factor[0]
        if not head_dim or head_dim >= 128 or factor == 1.0:
            return eff
        t = 0.0 if head_dim <= 64 else math.log2(head_dim / 64)  # 0 at d64, 1 at d128
        return eff * (factor + t * (1.0 - factor))

    def bandwidth(self, kernel_class: str) -> float:
        """Achieved bytes per second of a kernel of this class."""
        eff = self.bandwidth_efficiency.get(kernel_class, self.bandwidth_efficiency.get("*", 1.0))
        return self.bandwidth_bytes_per_s * eff

    def op_bandwidth(self, op_base: str, kernel_class: str) -> float:
        """Achieved bytes per second of one op: its own measured rate, else its class's."""
        return self.op_bytes_per_s.get(op_base) or self.bandwidth(kernel_class)

    def fresh_output_s(self, bytes_written: float) -> float:
        """Seconds of page faults of an output that large (0 below the threshold, or on a GPU)."""
        if not self.fresh_page_bytes_per_s or bytes_written < self.fresh_output_bytes:
            return 0.0
        return bytes_written / self.fresh_page_bytes_per_s

    def overhead_s(self, backward: bool) -> float:
        return self.launch_overhead_bwd_s if backward else self.launch_overhead_s

    @property
    def asynchronous(self) -> bool:
        """Whether kernels run apart from the host that launches them (a GPU: the launch cost
        is a floor under each kernel) or on it (the CPU: the per-op cost adds to each op)."""
        return self.kind == "gpu"

    def to_dict(self) -> dict:
        return asdict(self)


def interpolate_log(table: list, x: float) -> float:
    """y at x on the (x, y) points of ``table`` (sorted by x), linear in log x, clamped at the ends."""
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if x <= x1:
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + t * (y1 - y0)
    return table[-1][1]


def cpu_rates(calibration) -> Rates:
    """This machine, from a ``calibrate.Calibration``: the measured GEMM rate per dtype is the
    peak at efficiency 1 (it is what a GEMM achieves here); fused attention's efficiency is
    its measured rate over the GEMM rate; bandwidth is the measured copy rate; the overheads
    are the measured cost of one tiny op, so they stand for everything a small op costs on
    top of its bytes (dispatch, autograd bookkeeping), not a launch. Thin GEMMs take their
    measured rate by K; each memory-bound class its measured rate over the copy rate."""
    cal = calibration
    copy = cal.bandwidth_bytes_per_s
    efficiency = {"*": 1.0, **{cls: rate / copy for cls, rate in (cal.class_bytes_per_s or {}).items()}}
    by_op = {OP_OF_KERNEL[name]: rate for name, rate in (cal.kernel_bytes_per_s or {}).items() if name in OP_OF_KERNEL}
    attention = {}
    for dtype, gemm in cal.gemm_flops_per_s.items():
        fwd, bwd = cal.attention_fwd_flops_per_s.get(dtype), cal.attention_bwd_flops_per_s.get(dtype)
        if fwd and bwd:
            attention[dtype] = (fwd / gemm, bwd / gemm)
    return Rates(device=f"cpu: {cal.cpu} ({cal.threads} threads)", kind="cpu",
                 peak_flops_per_s=dict(cal.gemm_flops_per_s), bandwidth_bytes_per_s=cal.bandwidth_bytes_per_s,
                 launch_overhead_s=cal.overhead_fwd_s, launch_overhead_bwd_s=cal.overhead_bwd_s,
                 attention_efficiency=attention or {"*": (1.0, 1.0)}, sdpa_backend="cpu",
                 bandwidth_efficiency=efficiency, gemm_square_k=dict(cal.gemm_square_k or {}), op_bytes_per_s=by_op,
                 fresh_page_bytes_per_s=cal.fresh_page_bytes_per_s or 0.0, fresh_output_bytes=MMAP_THRESHOLD_BYTES,
                 gemm_k_flops_per_s={dtype: dict(table) for dtype, table in (cal.gemm_k_flops_per_s or {}).items()},
                 source=(f"attnprof calibrate on {cal.host}, {cal.measured_at} (torch {cal.torch_version})",))


def gpu_rates(gpu: GpuSpec, sdpa_backend: str = "flash") -> Rates:
    """A named GPU: datasheet peaks (gpus.toml) times the family's efficiency constants.
    ``sdpa_backend``: the backend the GPU would pick for the point (memmodel.sdpa_choice.choose_sdpa_backend)."""
    fam, note = C.family(gpu.compute_capability)
    peaks = {dtype: gpu.tflops[key] * 1e12 for dtype, key in C.GPU_PEAK_KEY.items() if key in gpu.tflops}
    fused = C.ATTENTION_EFFICIENCY[fam].get(sdpa_backend)
    attention = {"*": fused if fused else (C.GEMM_EFFICIENCY, C.GEMM_EFFICIENCY)}
    source = (f"{gpu.key}: peaks and bandwidth from {gpu.source}",
              f"efficiency constants for {fam} (attnprof/profiler/timemodel/constants.py, "
              f"docs/time-model.md)")
    return Rates(device=gpu.key, kind="gpu", peak_flops_per_s=peaks, bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
                 launch_overhead_s=C.LAUNCH_OVERHEAD_S, launch_overhead_bwd_s=C.LAUNCH_OVERHEAD_S,
                 gemm_efficiency=C.GEMM_EFFICIENCY, attention_efficiency=attention,
                 attention_d64_factor=C.ATTENTION_D64_FACTOR.get(sdpa_backend, (1.0, 1.0)),
                 bandwidth_efficiency={"*": C.BANDWIDTH_EFFICIENCY,
                                       "gather_scatter_sort": C.BANDWIDTH_EFFICIENCY * C.GATHER_BANDWIDTH_FACTOR},
                 sdpa_backend=sdpa_backend or "flash", source=source, notes=(note,) if note else ())
