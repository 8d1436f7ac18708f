"""``attnprof calibrate``: what this machine's CPU does, measured in a few seconds.

Measured with the torch thread count the sweep's timing pass uses, each figure the median
of ``REPEATS`` runs:

- GEMM rate per dtype: a square matmul, grown until one takes ``MIN_SAMPLE_S``;
- thin GEMM rates by inner dimension K, float32 and bfloat16 (calibrate_ops.gemm_by_k);
- per memory-bound kernel class (elementwise, reduction, gather/scatter/sort), bytes per
  second of a small mix of its kernels on tensors past the caches (calibrate_ops.class_rates);
- fused attention rate per dtype: forward and backward of one SDPA call (the CPU flash
  kernel), its FLOPs by torch's own flop-counter formulas (those of ``op_costs``);
- memory bandwidth: bytes read + written per second by a large copy (past the caches);
- fresh pages: the first-write cost of an output past glibc's mmap threshold;
- per-op overhead: a tiny transformer stack's forward (backward) time per op the model
  counts as a kernel: dispatch, autograd, and the Python and module calls around each op.

Everything stops at ``BUDGET_S``; dtypes not reached by then are left out (their points
get no predicted time). A result outside ``LIMITS`` (derived from this project's CPU figures
and the GPU table) is a ``CalibrationError``: a one-line UserError, never a prediction made
from it; a cached one is ignored with one warning and measured again (machine.py).
"""

from __future__ import annotations

import math
import socket
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Callable, Optional

from attnprof.errors import UserError
from attnprof.profiler.timemodel import calibrate_ops as ops

# Bumped whenever what is measured changes: cached calibrations of an older schema are
# measured again (2: thin GEMMs by K, per-class rates).
SCHEMA = 2
DTYPES = ("float32", "bfloat16", "float16", "float64")  # float32 first: it is required
REQUIRED_DTYPE = "float32"
GEMM_K_DTYPES = ("float32", "bfloat16")  # others (rare on a CPU, slow to measure) take the square rate
BUDGET_S = 15.0
REPEATS = 5
MIN_SAMPLE_S = 0.02  # a GEMM sample at least this long (timer resolution, thread wake-up)
GEMM_SIZES = (128, 256, 512, 1024, 2048)
COPY_BYTES = 64 << 20  # larger than the last-level caches of CPUs of today
ATTENTION_SHAPE = (1, 4, 512, 64)  # (batch, heads, n, head_dim)
# What a CPU cannot do: outside these, the measurement failed (a timer, a throttled or
# oversubscribed machine), and predictions made from it would be invented.
# The CPU's fused attention runs its block products on the same BLAS as a GEMM, so it cannot
# be much faster than one; far faster means the GEMM sample was disturbed.
MAX_ATTENTION_OVER_GEMM = 3.0
# A thin GEMM does less work per byte than a square one: far faster means a disturbed sample.
MAX_THIN_OVER_SQUARE = 3.0
# A memory-bound kernel moves no more bytes per second than a few times a plain copy (one
# that only reads, e.g. a sum, may beat the copy's read + write): far more, a disturbed copy.
MAX_CLASS_OVER_COPY = 10.0
# The bounds are derived, as the GPU table's are (hardware/gpus.py BOUNDS), from figures of
# record: this project's own CPU calibration (docs/time-model.md, "This machine", 2 threads,
# 2026-11-30: the slowest rate 99 GFLOP/s, float32 thin GEMM at K 16; the slowest kernel
# 0.6 GB/s, sort; the smallest per-op overhead 11.2 us, backward) and the fastest GPU of the
# built-in table (gpus.toml: 989.4 TFLOP/s dense, H100/H200 bf16; 4.8 TB/s, H200).
# tests/profiler/timemodel/test_calibrate.py reads both sources again.
CPU_SLOWEST_FLOPS_PER_S, CPU_SLOWEST_BYTES_PER_S, CPU_LEAST_OVERHEAD_S = 99e9, 0.6e9, 11.2e-6
GPU_FASTEST_FLOPS_PER_S, GPU_FASTEST_BYTES_PER_S = 989.4e12, 4.8e12
# Lowest: 1000x below those CPU figures (one thread of an old CPU, float64, a busy machine:
# a busy 2-vCPU VM measured 10x less). Highest: no CPU outruns the fastest datasheet GPU (a
# kernel that only reads, e.g. a sum, counts half a copy's traffic: 2x for bytes); an
# overhead of 10 ms per op is a machine too busy to measure. A figure outside, e.g. 5e-324
# FLOP/s from a hand-edited cache, would predict an infinite time (not JSON, issue 40).
LIMITS = {"flops_per_s": (CPU_SLOWEST_FLOPS_PER_S / 1000, GPU_FASTEST_FLOPS_PER_S),
          "bandwidth_bytes_per_s": (CPU_SLOWEST_BYTES_PER_S / 1000, 2 * GPU_FASTEST_BYTES_PER_S),
          "overhead_s": (CPU_LEAST_OVERHEAD_S / 1000, 1e-2)}


class CalibrationError(UserError):
    """A calibration that failed or measured something implausible; one line."""


@dataclass(frozen=True)
class Calibration:
    host: str
    cpu: str  # the CPU model
    torch_version: str
    threads: int  # torch threads it ran with (the sweep's timing pass uses the same)
    gemm_flops_per_s: dict  # dtype -> FLOP/s
    attention_fwd_flops_per_s: dict  # dtype -> FLOP/s of SDPA forward
    attention_bwd_flops_per_s: dict  # dtype -> FLOP/s of SDPA backward
    bandwidth_bytes_per_s: float  # read + written bytes per second of a large copy
    overhead_fwd_s: float  # one tiny op, autograd recording
    overhead_bwd_s: float  # one tiny op inside a backward pass
    gemm_square_k: dict = field(default_factory=dict)  # dtype -> n of the square GEMM that gave the rate
    gemm_k_flops_per_s: dict = field(default_factory=dict)  # dtype -> {str(K): FLOP/s of a thin batched GEMM}
    class_bytes_per_s: dict = field(default_factory=dict)  # kernel class -> bytes/s (median of its mix)
    kernel_bytes_per_s: dict = field(default_factory=dict)  # each kernel of the mixes -> bytes/s
    fresh_page_bytes_per_s: float = 0.0  # first-touch faults of a fresh output past glibc's mmap threshold; 0: none
    wall_s: float = 0.0  # how long the measurement took
    measured_at: str = ""  # ISO time
    notes: list = field(default_factory=list)

    def key(self) -> dict:
        return cache_key(self.host, self.cpu, self.torch_version, self.threads)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not names - {"wall_s", "measured_at", "notes"} <= set(data):
            raise CalibrationError("not a calibration record")
        return cls(**{k: v for k, v in data.items() if k in names})


def cache_key(host: str, cpu: str, torch_version: str, threads: int) -> dict:
    return {"host": host, "cpu": cpu, "torch": torch_version, "threads": threads, "schema": SCHEMA}


# --- plausibility ----------------------------------------------------------------------------
def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric(value) -> bool:
    """A number of JSON's kinds (NaN and infinities too: the range checks name those)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _outside(value, limit: str) -> bool:
    lo, hi = LIMITS[limit]
    return not _number(value) or not lo <= value <= hi


def _bounds(limit: str, unit: str) -> str:
    """A limit as printed: '[9.9e+07, 9.9e+14] FLOP/s'."""
    lo, hi = LIMITS[limit]
    return f"[{lo:.2g}, {hi:.2g}] {unit}"


# Each field's type, checked before any figure is (a cache file is data: a list where a table
# of dtypes goes must be a reason, not a TypeError). Tables are checked entry by entry below.
_TEXT_FIELDS = ("host", "cpu", "torch_version", "measured_at")
_NUMBER_FIELDS = ("bandwidth_bytes_per_s", "overhead_fwd_s", "overhead_bwd_s", "fresh_page_bytes_per_s", "wall_s")
_TABLE_FIELDS = {"gemm_flops_per_s": "GEMM rates are not a table of dtypes",
                 "attention_fwd_flops_per_s": "attention forward rates are not a table of dtypes",
                 "attention_bwd_flops_per_s": "attention backward rates are not a table of dtypes",
                 "gemm_square_k": "square GEMM sizes are not a table of dtypes",
                 "gemm_k_flops_per_s": "thin GEMM rates are not a table of dtypes",
                 "class_bytes_per_s": "kernel class rates are not a table of classes",
                 "kernel_bytes_per_s": "kernel rates are not a table of kernels"}


def _type_problems(cal: Calibration) -> list[str]:
    out = [f"{name} {getattr(cal, name)!r:.60} is not text" for name in _TEXT_FIELDS
           if not isinstance(getattr(cal, name), str)]
    out += [f"{name} {getattr(cal, name)!r:.60} is not a number" for name in _NUMBER_FIELDS
            if not _numeric(getattr(cal, name))]
    for name, wrong in _TABLE_FIELDS.items():
        table = getattr(cal, name)
        if not isinstance(table, dict):
            out.append(f"{wrong}: {name} is {table!r:.60}")
        elif not all(isinstance(k, str) for k in table):
            out.append(f"{name} has a key that is not text")
        elif name != "gemm_k_flops_per_s" and not all(_numeric(v) for v in table.values()):
            out.append(f"{name} has a value that is not a number: {table!r:.60}")
    if not isinstance(cal.threads, int) or isinstance(cal.threads, bool) or cal.threads < 1:
        out.append(f"thread count {cal.threads!r:.60} is not a positive integer")
    if not isinstance(cal.notes, list) or not all(isinstance(n, str) for n in cal.notes):
        out.append("notes are not a list of text")
    return out


def problems(cal: Calibration) -> list[str]:
    """Why ``cal`` cannot be used, one line each; [] when it is plausible. Types first:
    the figures are only compared once every field is of the type it must be."""
    out = _type_problems(cal)
    if out:
        return out
    if REQUIRED_DTYPE not in cal.gemm_flops_per_s:
        out.append(f"no {REQUIRED_DTYPE} GEMM rate was measured")
    for what, rates in (("GEMM", cal.gemm_flops_per_s), ("attention forward", cal.attention_fwd_flops_per_s),
                        ("attention backward", cal.attention_bwd_flops_per_s)):
        if not isinstance(rates, dict):
            out.append(f"{what} rates are not a table of dtypes")
            continue
        for dtype, value in rates.items():
            if _outside(value, "flops_per_s"):
                out.append(f"{dtype} {what} rate {value!r} FLOP/s is not in {_bounds('flops_per_s', 'FLOP/s')}")
    gemm, attention = cal.gemm_flops_per_s.get(REQUIRED_DTYPE), cal.attention_fwd_flops_per_s.get(REQUIRED_DTYPE)
    if _number(gemm) and _number(attention) and gemm > 0 and attention > MAX_ATTENTION_OVER_GEMM * gemm:
        out.append(f"{REQUIRED_DTYPE} attention ran at {attention / gemm:.0f}x the GEMM rate, which it cannot: "
                   f"the GEMM measurement was disturbed (a busy machine?)")
    if _outside(cal.bandwidth_bytes_per_s, "bandwidth_bytes_per_s"):
        out.append(f"memory bandwidth {cal.bandwidth_bytes_per_s!r} B/s is not in {_bounds('bandwidth_bytes_per_s', 'B/s')}"
                   f" for a CPU")
    for what, value in (("forward", cal.overhead_fwd_s), ("backward", cal.overhead_bwd_s)):
        if _outside(value, "overhead_s"):
            out.append(f"{what} per-op overhead {value!r} s is not in {_bounds('overhead_s', 's')}")
    out.extend(_thin_gemm_problems(cal))
    out.extend(_class_problems(cal))
    return out


def _thin_gemm_problems(cal: Calibration) -> list[str]:
    if not isinstance(cal.gemm_k_flops_per_s, dict) or not isinstance(cal.gemm_square_k, dict):
        return ["thin GEMM rates are not a table of dtypes"]
    out = []
    for dtype, n in cal.gemm_square_k.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            out.append(f"{dtype} square GEMM size {n!r} is not a positive integer")
    for dtype, table in cal.gemm_k_flops_per_s.items():
        if not isinstance(table, dict) or not table:
            out.append(f"{dtype} thin GEMM rates are not a table of K")
            continue
        square = cal.gemm_flops_per_s.get(dtype) if isinstance(cal.gemm_flops_per_s, dict) else None
        for k, value in table.items():
            if not str(k).isdigit() or int(k) < 1:
                out.append(f"{dtype} thin GEMM inner dimension {k!r} is not a positive integer")
            elif _outside(value, "flops_per_s"):
                out.append(f"{dtype} GEMM rate at K={k} {value!r} FLOP/s is not in {_bounds('flops_per_s', 'FLOP/s')}")
            elif _number(square) and square > 0 and value > MAX_THIN_OVER_SQUARE * square:
                out.append(f"{dtype} GEMM at K={k} ran at {value / square:.0f}x the square GEMM rate, which it cannot: "
                           f"the square GEMM measurement was disturbed (a busy machine?)")
    return out


def _class_problems(cal: Calibration) -> list[str]:
    if not isinstance(cal.class_bytes_per_s, dict):
        return ["kernel class rates are not a table of classes"]
    if not isinstance(cal.kernel_bytes_per_s, dict):
        return ["kernel rates are not a table of kernels"]
    out = []
    copy = cal.bandwidth_bytes_per_s
    fresh = cal.fresh_page_bytes_per_s
    if fresh != 0.0 and _outside(fresh, "bandwidth_bytes_per_s"):
        out.append(f"fresh-page rate {fresh!r} B/s is not 0 (none) or in {_bounds('bandwidth_bytes_per_s', 'B/s')}")
    for cls, value in [*cal.class_bytes_per_s.items(), *cal.kernel_bytes_per_s.items()]:
        if _outside(value, "bandwidth_bytes_per_s"):
            out.append(f"{cls} kernels' rate {value!r} B/s is not in {_bounds('bandwidth_bytes_per_s', 'B/s')} for a CPU")
        elif _number(copy) and copy > 0 and value > MAX_CLASS_OVER_COPY * copy:
            out.append(f"{cls} kernels moved {value / copy:.0f}x the bytes per second of a copy, which they cannot: "
                       f"the copy measurement was disturbed (a busy machine?)")
    return out


def check(cal: Calibration) -> Calibration:
    """``cal``, or CalibrationError naming the first implausible figure."""
    found = problems(cal)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CalibrationError(f"calibration of this machine is implausible: {found[0]}{more}; "
                               f"time predictions are left out (run `attnprof calibrate --no-cache` to measure again)")
    return cal


# --- measuring ---------------------------------------------------------------------------------
_median_s = ops.median_s


def gemm_flops_per_s(dtype: str) -> tuple[float, int]:
    """(FLOP/s, n): the best of the median rates of square matmuls of growing size, up to the first
    size whose median takes ``MIN_SAMPLE_S``: a small size alone would measure the thread
    pool's wake-up (or, on a busy machine, a scheduler time slice) more than the GEMM."""
    import torch

    best, best_n = 0.0, 0
    for n in GEMM_SIZES:
        a, b = torch.randn(n, n).to(getattr(torch, dtype)), torch.randn(n, n).to(getattr(torch, dtype))
        seconds = _median_s(lambda: torch.mm(a, b), repeats=3 if n != GEMM_SIZES[-1] else REPEATS)
        if 2 * n**3 / seconds > best:
            best, best_n = 2 * n**3 / seconds, n
        if seconds >= MIN_SAMPLE_S:
            break
    return best, best_n


def attention_flops_per_s(dtype: str) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    shape = ATTENTION_SHAPE
    q, k, v = (torch.randn(shape).to(getattr(torch, dtype)).requires_grad_() for _ in range(3))
    grad = torch.randn(shape).to(getattr(torch, dtype))
    fwd_s = _median_s(lambda: F.scaled_dot_product_attention(q, k, v))

    def backward():
        out = F.scaled_dot_product_attention(q, k, v)
        t0 = time.perf_counter()
        out.backward(grad)
        return time.perf_counter() - t0

    backward()
    bwd_s = statistics.median(backward() for _ in range(REPEATS))
    return sdpa_flop_count(shape, shape, shape) / fwd_s, sdpa_backward_flop_count(shape, shape, shape, shape) / bwd_s


def bandwidth_bytes_per_s() -> float:
    import torch

    src = torch.ones(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    return 2 * COPY_BYTES / _median_s(lambda: dst.copy_(src))


def describe_machine(threads: Optional[int] = None) -> tuple[str, str, str, int]:
    """(host, CPU model, torch version, threads): the calibration's cache key."""
    import torch

    from attnprof.profiler.measure.host import device_environment

    return (socket.gethostname(), device_environment("cpu").get("cpu") or "cpu", torch.__version__,
            threads or torch.get_num_threads())


def measure(threads: Optional[int] = None, budget_s: float = BUDGET_S) -> Calibration:
    """Measure this machine with ``threads`` torch threads (default: torch's current count)."""
    import torch

    host, cpu, version, threads = describe_machine(threads)
    previous = torch.get_num_threads()
    started = time.perf_counter()
    notes = []
    gemm, square_k, thin, att_fwd, att_bwd = {}, {}, {}, {}, {}
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            bandwidth = bandwidth_bytes_per_s()
        kernels = ops.kernel_rates()
        with torch.no_grad():
            fresh = ops.fresh_page_bytes_per_s()
        over_fwd, over_bwd = ops.module_overhead_s()
        for dtype in DTYPES:
            if dtype != REQUIRED_DTYPE and time.perf_counter() - started > budget_s / 2:
                notes.append(f"{dtype} not measured: the {budget_s:g} s budget was half spent")
                continue
            with torch.no_grad():
                gemm[dtype], square_k[dtype] = gemm_flops_per_s(dtype)
                if dtype in GEMM_K_DTYPES:
                    thin[dtype] = ops.gemm_by_k(dtype)
            att_fwd[dtype], att_bwd[dtype] = attention_flops_per_s(dtype)
    except Exception as exc:  # noqa: BLE001 - a failed measurement is a one-line error
        raise CalibrationError(f"calibration of this machine failed: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:200]}") from None
    finally:
        torch.set_num_threads(previous)
    return Calibration(host=host, cpu=cpu, torch_version=version, threads=threads, gemm_flops_per_s=gemm,
                       attention_fwd_flops_per_s=att_fwd, attention_bwd_flops_per_s=att_bwd,
                       bandwidth_bytes_per_s=bandwidth, overhead_fwd_s=over_fwd, overhead_bwd_s=over_bwd,
                       gemm_square_k=square_k, gemm_k_flops_per_s=thin, class_bytes_per_s=ops.class_rates(kernels),
                       kernel_bytes_per_s=kernels, fresh_page_bytes_per_s=fresh,
                       wall_s=round(time.perf_counter() - started, 3),
                       measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=notes)
