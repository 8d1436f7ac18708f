"""Measurements of ``attnprof calibrate`` beyond the square GEMM: thin GEMMs and the rate of
each memory-bound kernel class (calibrate.py runs them, within its budget).

- ``gemm_by_k``: batched GEMMs (``GEMM_K_BATCH`` x ``GEMM_K_OUT`` x K) @ (K x ``GEMM_K_OUT``)
  at each K of ``GEMM_K``: attention's QK^T (K = head_dim, an n x n output), and the
  projections' small-K matmuls. A thin GEMM does 2 K FLOPs per output element, too few to
  hide the output's writes and the kernel's packing: on a CPU it runs far below the square
  rate (docs/time-model.md).
- ``class_rates``: bytes (read + written, the definition of op_costs: the distinct input and
  output tensors) per second of representative kernels of each memory-bound class on
  float32 tensors of ``CLASS_BYTES`` (past the L2 caches, the size of a 1024 x 1024 score
  block of 4 heads), each class the median of its mix (``CLASS_MIX``). The CPU's efficiency
  of a class is its rate over the copy rate (rates.cpu_rates).

- ``fresh_page_bytes_per_s``: what a fresh large output costs on top of its writes. glibc
  serves an allocation above its mmap threshold (at most ``MMAP_THRESHOLD_BYTES``, 32 MiB
  on 64-bit Linux) with new pages from the kernel, and frees it back: every page of such an
  output faults (and is zeroed) on first write, every time the op runs. Measured as a fill
  of a freshly allocated ``FRESH_BYTES`` tensor against the same fill of a reused one.

Ops measured here by name run at their own rate in the model (``OP_OF_KERNEL``: masked_fill
and sort, for instance, are far slower than the rest of their class); every other op at its
class's median. Each figure is the median of ``REPEATS`` runs after a warm-up run.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

REPEATS = 5
GEMM_K = (16, 32, 64, 128, 256)
GEMM_K_BATCH = 4
GEMM_K_OUT = 1024
CLASS_BYTES = 16 << 20  # one float32 operand: 4 M elements
ROW = 1024  # softmax / sort / gather along rows of this length (an attention row at n 1024)
LN_WIDTH = 128  # layer norm over d_model 128
# Per class, the kernels measured; the class rate is the median of their rates.
# glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit): an output at
# least this large gets fresh pages each time it is allocated
MMAP_THRESHOLD_BYTES = 32 << 20
FRESH_BYTES = 64 << 20
# calibration kernel -> the aten op (overload packet) whose rows it stands for
OP_OF_KERNEL = {"add": "add", "mul": "mul", "masked_fill": "masked_fill", "gelu": "gelu", "exp": "exp",
                "softmax": "_softmax", "softmax_backward": "_softmax_backward_data", "sum": "sum",
                "layer_norm": "native_layer_norm", "gather": "gather", "scatter_add": "scatter_add", "sort": "sort"}
CLASS_MIX = {
    "elementwise": ("add", "mul", "masked_fill", "gelu", "exp"),
    "reduction": ("softmax", "softmax_backward", "sum", "layer_norm"),
    "gather_scatter_sort": ("gather", "scatter_add", "sort"),
}


def median_s(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    fn()  # warm: thread pool, allocator, kernel selection
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def gemm_by_k(dtype: str, repeats: int = REPEATS) -> dict:
    """{str(K): FLOP/s} of batched thin GEMMs at each K of GEMM_K (string keys: JSON)."""
    import torch

    dt = getattr(torch, dtype)
    b, n = GEMM_K_BATCH, GEMM_K_OUT
    out = {}
    for k in GEMM_K:
        a, c = torch.randn(b, n, k).to(dt), torch.randn(b, k, n).to(dt)
        out[str(k)] = 2 * b * n * n * k / median_s(lambda: torch.bmm(a, c), repeats)
    return out


def _kernels() -> dict:
    """name -> (function, bytes read + written), on float32 tensors of CLASS_BYTES."""
    import torch
    import torch.nn.functional as F

    n = CLASS_BYTES // 4
    x, y = torch.randn(n // ROW, ROW), torch.randn(n // ROW, ROW)
    mask = torch.rand(n // ROW, ROW) > 0.5
    soft = torch.softmax(x, -1)
    idx = torch.randint(0, ROW, (n // ROW, ROW))
    zero = torch.zeros_like(x)
    ln_x = x.view(-1, LN_WIDTH)
    w, bias = torch.ones(LN_WIDTH), torch.zeros(LN_WIDTH)
    f32 = 4 * n
    rows = 4 * (n // ROW)
    return {
        "add": (lambda: x + y, 3 * f32),
        "mul": (lambda: x * y, 3 * f32),
        "masked_fill": (lambda: x.masked_fill(mask, float("-inf")), 2 * f32 + n),
        "gelu": (lambda: F.gelu(x), 2 * f32),
        "exp": (lambda: torch.exp(x), 2 * f32),
        "softmax": (lambda: torch.softmax(x, -1), 2 * f32),
        "softmax_backward": (lambda: torch.ops.aten._softmax_backward_data(y, soft, -1, torch.float32), 3 * f32),
        "sum": (lambda: x.sum(-1), f32 + rows),
        "layer_norm": (lambda: F.layer_norm(ln_x, (LN_WIDTH,), w, bias), 2 * f32 + 8 * (n // LN_WIDTH)),
        "gather": (lambda: torch.gather(x, -1, idx), 2 * f32 + 2 * f32),
        "scatter_add": (lambda: torch.scatter_add(zero, -1, idx, y), 3 * f32 + 2 * f32),
        "sort": (lambda: torch.sort(x, -1), 2 * f32 + 2 * f32),
    }


def kernel_rates(repeats: int = REPEATS) -> dict:
    """{kernel name: bytes per second} of every kernel of CLASS_MIX."""
    import torch

    with torch.no_grad():
        return {name: nbytes / median_s(fn, repeats) for name, (fn, nbytes) in _kernels().items()}


def fresh_page_bytes_per_s(repeats: int = REPEATS) -> float:
    """Bytes per second of first-touch page faults on a fresh large output (0.0: none seen)."""
    import torch

    n = FRESH_BYTES // 4
    reused = torch.empty(n)
    fresh_s = median_s(lambda: torch.empty(n).fill_(1.0), repeats)
    reused_s = median_s(lambda: reused.fill_(1.0), repeats)
    return FRESH_BYTES / (fresh_s - reused_s) if fresh_s > reused_s else 0.0


def class_rates(kernels: dict) -> dict:
    """{class: bytes per second}, the median of the class's kernels (those measured)."""
    out = {}
    for cls, names in CLASS_MIX.items():
        found = [kernels[n] for n in names if n in kernels]
        if found:
            out[cls] = statistics.median(found)
    return out


# --- per-op overhead of a real module --------------------------------------------------------
TINY = (1, 8, 16)  # (batch, n, d_model) of the overhead module: no op moves enough data to matter
TINY_HEADS = 2
TINY_BLOCKS = 4


def _tiny_model():
    """A pre-norm transformer stack on tiny tensors: the ops (and the Python and nn.Module
    calls around them) attnprof's variants run, with no data to move."""
    import torch
    from torch import nn

    b, n, d = TINY

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, TINY_HEADS, -1).permute(2, 0, 3, 1, 4).unbind(0)
            scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
            mask = torch.ones(n, n, dtype=torch.bool).triu(1)
            attn = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
            x = x + self.out(attn.transpose(1, 2).reshape(b, n, d))
            return x + self.ff(self.ln2(x))

    return nn.Sequential(*(Block() for _ in range(TINY_BLOCKS))), torch.randn(*TINY, requires_grad=True)


def _kernel_counts(model, x) -> tuple[int, int]:
    """(forward, backward) aten ops of one step that the time model counts as kernels (not views)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnprof.profiler.timemodel.op_classes import kernel_class

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if kernel_class(str(func.name()).split("::", 1)[-1]) != "view":
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        y = model(x).sum()
    fwd, Count.n = Count.n, 0
    with Count():
        y.backward()
    return fwd, Count.n


def module_overhead_s(repeats: int = REPEATS) -> tuple[float, float]:
    """(forward, backward) seconds per counted kernel of a tiny transformer stack's step:
    dispatch, autograd and the Python and module calls around each op, as in a real model."""
    model, x = _tiny_model()
    fwd_ops, bwd_ops = _kernel_counts(model, x)
    fwd, bwd = [], []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        y = model(x).sum()
        t1 = time.perf_counter()
        y.backward()
        t2 = time.perf_counter()
        if i:  # the first is the warm-up
            fwd.append((t1 - t0) / fwd_ops)
            bwd.append((t2 - t1) / bwd_ops)
    return statistics.median(fwd), statistics.median(bwd)
