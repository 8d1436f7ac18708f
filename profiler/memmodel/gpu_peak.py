"""Predicted GPU memory of a point on a named GPU: trace -> GPU kernels -> caching allocator.

    gpu_total_bytes           = context_bytes + gpu_reserved_peak_bytes      (what NVML shows)
    gpu_reserved_peak_bytes   = the simulated max_memory_reserved   (segments)
    gpu_allocated_peak_bytes  = the simulated max_memory_allocated  (rounded blocks)
    gpu_tensor_peak_bytes     = the peak of live tensor bytes with the GPU's kernels (unrounded)

so tensor <= allocated <= reserved <= total always. ``gpu_fits``: the allocator, given
the GPU's memory less the context, never runs out (it releases cached segments and
retries before giving up, as PyTorch does); with a budget below the GPU's memory, the
allocator is capped at the budget instead (``set_per_process_memory_fraction``). Every figure is a model, never a
measurement: records carry them in ``gpu_*`` fields, tables label them "model".

One point here; its step time (the time model) and many points (budget searches, the
report's capacity figures) are the prediction layer's: profiler/predict/gpu_points.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Optional

from attnprof.profiler.memmodel.caching_allocator import CachingAllocator, OutOfMemory
from attnprof.profiler.memmodel.sdpa_choice import choose_sdpa_backend
from attnprof.profiler.memmodel.blas_workspaces import cublas_workspace_bytes
from attnprof.profiler.memmodel.sdpa_kernels import ALIAS, ALLOC, CPU_FLASH_FWD, FREE, OP, TIE, substitute
from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.records import Point

MODEL_LABEL = "GPU memory MODEL (predicted: fake-tensor trace replayed through a simulated CUDA caching allocator)"


# --- replaying events through the allocator ---------------------------------------------------
@dataclass
class Replay:
    tensor_peak_bytes: int = 0  # live requested bytes (the GPU kernels' tensors), peak
    allocated_peak_bytes: int = 0
    reserved_peak_bytes: int = 0
    end_allocated_bytes: int = 0
    end_reserved_bytes: int = 0
    segments: int = 0
    retries: int = 0  # allocations that needed cached segments released first
    oom_at: str = ""  # the op whose allocation ran out of memory


def replay(events: list, allocator: CachingAllocator) -> Replay:
    """Allocate and free in trace order. Names (storage serials or substituted buffers) map
    to blocks; ALIAS adds a name to a block, TIE frees names with their owner. Raises
    ``OutOfMemory`` (with ``.op``) when the allocator runs out."""
    blocks: dict = {}  # block id -> [Block | None, refs, requested bytes]
    names: dict = {}  # name -> block id
    tied: dict = {}  # owner name -> [names]
    live = peak = 0
    next_id = 0
    last_op = ""

    def free(name) -> None:
        nonlocal live
        bid = names.pop(name, None)
        if bid is None:
            return
        entry = blocks[bid]
        entry[1] -= 1
        if entry[1] == 0:
            allocator.free(entry[0])
            live -= entry[2]
            del blocks[bid]
        for other in tied.pop(name, ()):
            free(other)

    for e in events:
        kind = e[0]
        if kind == ALLOC:
            _, name, nbytes, op = e
            if name in names:  # a name reused: free the old one first (never in tracker traces)
                free(name)
            try:
                block = allocator.malloc(nbytes)
            except OutOfMemory as exc:
                exc.op = op or last_op
                raise
            blocks[next_id] = [block, 1, nbytes]
            names[name] = next_id
            next_id += 1
            live += nbytes
            peak = max(peak, live)
        elif kind == FREE:
            free(e[1])
        elif kind == ALIAS:
            bid = names.get(e[2])
            if bid is not None:
                names[e[1]] = bid
                blocks[bid][1] += 1
        elif kind == TIE:
            tied.setdefault(e[1], []).extend(e[2])
        elif kind == OP:
            last_op = e[1]
    s = allocator.stats
    return Replay(peak, s.peak_allocated, s.peak_reserved, s.allocated, s.reserved, s.segments, s.alloc_retries)


# --- one point on one GPU -----------------------------------------------------------------------
def _record(name) -> dict:
    """A GpuPrediction field that is a record field of the same value, named ``name``."""
    return {"record": name}


@dataclass
class GpuPrediction:
    gpu: str = field(metadata=_record("gpu"))
    # flash | efficient | cudnn | math | "" (the variant calls no SDPA)
    sdpa_backend: str = field(metadata=_record("gpu_sdpa_backend"))
    sdpa_reason: str
    tensor_peak_bytes: int = field(metadata=_record("gpu_tensor_peak_bytes"))
    allocated_peak_bytes: int = field(metadata=_record("gpu_allocated_peak_bytes"))
    reserved_peak_bytes: int = field(metadata=_record("gpu_reserved_peak_bytes"))
    context_bytes: int
    total_bytes: int = field(metadata=_record("gpu_total_bytes"))
    fits: bool = field(metadata=_record("gpu_fits"))
    memory_bytes: int
    traced_peak_bytes: int  # the trace's tensor peak: the step as CUDA runs it (= predict(on_device(point, "cuda")))
    cublas_workspaces: int = 0
    cublas_workspace_bytes: int = 0
    notes: list = field(default_factory=list, metadata=_record("gpu_note"))  # joined with "; "
    # gpu_time_fwd_ms, gpu_time_bwd_ms, gpu_tokens_per_s (the time model: timemodel/fields.GPU_TIME_FIELDS),
    # filled in by predict/gpu_points.predict_gpu; each its own record field
    times: dict = field(default_factory=dict,
                        metadata={"record": ("gpu_time_fwd_ms", "gpu_time_bwd_ms", "gpu_tokens_per_s")})

    def fields(self) -> dict:
        """The record's gpu_* fields (GPU_FIELDS)."""
        out = {}
        for f in fields(self):
            name, value = f.metadata.get("record"), getattr(self, f.name)
            if isinstance(name, tuple):
                out.update({k: value.get(k) for k in name})
            elif name is not None:
                out[name] = "; ".join(value) if f.name == "notes" else value
        return out


def _record_fields() -> tuple:
    out = []
    for f in fields(GpuPrediction):
        name = f.metadata.get("record")
        out += list(name) if isinstance(name, tuple) else [name] if name else []
    return tuple(out)


GPU_FIELDS = _record_fields()  # a record's gpu_* fields, in order: GpuPrediction's, derived


def _has_sdpa(events: list) -> bool:
    return any(e[0] == OP and e[1].split(".", 1)[0] == CPU_FLASH_FWD for e in events)


def sdpa_choice(point: Point, gpu: GpuSpec, events: Optional[list] = None):
    """The SDPA backend ``gpu`` would run for ``point`` (memmodel/sdpa_choice.py), None where
    ``events`` (its trace) call no SDPA: by the dtype the traced SDPA ran in (under autocast
    the low-precision one, issue 24), else the autocast dtype or the parameters'; grouped K/V
    heads as the point has them. One rule for the memory model, the timeline and the time
    model's rates."""
    if events is not None and not _has_sdpa(events):
        return None
    shape = point.shape
    dtype = _sdpa_dtype(events or [], shape.autocast or shape.dtype)
    return choose_sdpa_backend(gpu, dtype, shape.head_dim, requires_grad=not point.forward_only,
                               grouped_kv=shape.n_kv_heads != shape.heads, dropout=sdpa_dropout(point))


def sdpa_dropout(point: Point) -> float:
    """The dropout_p of the point's SDPA calls (issue 39): its variant's ``dropout`` option (the
    sdpa variant passes it while training, and attnprof never puts a module in eval mode), 0
    without one. The trace does not carry it: a GPU's step is traced with the fused op's dropout
    left out (measure/cuda_branches.py)."""
    from attnprof.scenarios.variants.registry import spec_of

    return float(spec_of(point).options.get("dropout") or 0.0)


def _sdpa_dtype(events: list, default: str) -> str:
    """The dtype the traced SDPA's query had: under autocast (issue 24: Shape.autocast) it is
    the low-precision one, not the parameters' ``Shape.dtype``; ``default`` if the trace does not say."""
    for e in events:
        if e[0] == OP and e[1].split(".", 1)[0] == CPU_FLASH_FWD and isinstance(e[2], dict):
            args = e[2].get("args") or [None]
            return getattr(args[0], "dtype", None) or default
    return default


class TraceCache:
    """Traces of one point, recorded once and shared by every GPU (and the math path once),
    and whatever else a caller keeps per point beside them (``memo``: the op rows)."""

    def __init__(self):
        self._traces: dict = {}
        self._memo: dict = {}

    def memo(self, name: str, point: Point, make: Callable[[Point], object]):
        """``make(point)``, made once per (name, point) and kept."""
        key = (name, point.key())
        if key not in self._memo:
            self._memo[key] = make(point)
        return self._memo[key]

    def get(self, point: Point, sdpa_math: bool = False):
        from attnprof.profiler.memmodel.trace import record_trace

        key = (point.key(), sdpa_math)
        if key not in self._traces:
            self._traces[key] = record_trace(point, sdpa_math=sdpa_math)
        return self._traces[key]


# --- issue 24: attention dropout (issue 39: as CUDA runs it, measure/cuda_branches.py) ---
def dropout_notes(dropout: float, backend: str = "") -> list:
    """What the model assumes of a point's attention dropout (``sdpa_dropout``) on a GPU, or []."""
    if not dropout:
        return []
    unknown = {"flash": "its RNG state and no split-KV modelled",
               "efficient": "its backward's workspace taken as without dropout (a kernel with dropout may differ)",
               "cudnn": "its workspace taken as without dropout"}
    if backend in unknown:
        return [f"attention dropout inside SDPA's {backend} kernel: {unknown[backend]}"]
    return ["attention dropout as CUDA runs it: native_dropout, a 1-byte mask saved for backward"]


def gpu_memory(point: Point, gpu: GpuSpec, cache: Optional[TraceCache] = None,
               limit_bytes: Optional[int] = None) -> GpuPrediction:
    """The model's allocated, reserved and total peaks of ``point`` on ``gpu`` (no step
    time: ``predict.gpu_points.predict_gpu`` adds it).

    ``limit_bytes`` (a budget below the GPU's memory, context included) caps the allocator's
    reserved bytes at the budget less the context, as
    ``torch.cuda.set_per_process_memory_fraction((budget - context) / memory)`` would: PyTorch
    treats a ``cudaMalloc`` that would take its reserved bytes past ``allowed_memory_maximum``
    (fraction x device total; the context is not part of it) as a failed one, so it releases
    its cached segments and retries there, not at the device's capacity
    (c10/cuda/CUDACachingAllocator.cpp). ``fits`` is then against the budget."""
    cache = cache or TraceCache()
    trace = cache.get(point)
    traced_peak = trace.tensor_peak_bytes  # the step as CUDA runs it: predict(on_device(point, "cuda"))'s peak
    backend, reason = "", "the variant calls no scaled_dot_product_attention"
    choice = sdpa_choice(point, gpu, trace.events)
    if choice is not None:
        backend, reason = choice.backend, choice.reason
        if backend == "math":
            trace = cache.get(point, sdpa_math=True)
    dropout = sdpa_dropout(point)
    sub = substitute(trace.events, gpu, backend or "math", dropout=dropout)
    notes = list(sub.notes) + dropout_notes(dropout, backend)
    if gpu.context_estimated:
        notes.append(f"CUDA context estimated at {gpu.context_bytes >> 20} MiB")
    if point.shape.autocast:  # issue 39: the CPU run's autocast follows CUDA's lists (measure/cuda_autocast.py)
        notes.append(f"autocast {point.shape.autocast} traced with CUDA autocast's op lists, applied on the CPU")
    workspaces = sum(1 for e in sub.events if e[0] == ALLOC and str(e[1]).startswith("cublas.workspace"))
    memory = gpu.memory_bytes if limit_bytes is None else min(gpu.memory_bytes, limit_bytes)
    if memory < gpu.memory_bytes:
        notes.append(f"allocator capped at the budget, {memory >> 20} MiB with the context "
                     f"(as set_per_process_memory_fraction would cap it at the budget less the context)")
    free = replay(sub.events, CachingAllocator())
    total = gpu.context_bytes + free.reserved_peak_bytes
    result, fits = free, True
    if total > memory:  # would it still fit, with PyTorch releasing its cache on OOM?
        try:
            result = replay(sub.events, CachingAllocator(capacity=max(0, memory - gpu.context_bytes)))
            notes.append(f"fits only by releasing cached segments ({result.retries}x)")
            total = gpu.context_bytes + result.reserved_peak_bytes
        except OutOfMemory as exc:
            fits, result = False, free
            notes.append(f"out of memory at {getattr(exc, 'op', '') or 'an allocation'}: "
                         f"figures are what it would need")
    return GpuPrediction(gpu.key, backend, reason, result.tensor_peak_bytes, result.allocated_peak_bytes,
                         result.reserved_peak_bytes, gpu.context_bytes, total, fits, gpu.memory_bytes,
                         traced_peak, workspaces, cublas_workspace_bytes(gpu), notes)
