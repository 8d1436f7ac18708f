"""Predicted GPU memory of a point on a named GPU: trace -> GPU kernels -> caching allocator.

    gpu_total_bytes           = context_bytes + gpu_reserved_peak_bytes      (what NVML shows)
    gpu_reserved_peak_bytes   = the simulated max_memory_reserved   (segments)
    gpu_allocated_peak_bytes  = the simulated max_memory_allocated  (rounded blocks)
    gpu_tensor_peak_bytes     = the peak of live tensor bytes with the GPU's kernels (unrounded)

so tensor <= allocated <= reserved <= total always. ``gpu_fits``: the allocator, given
the GPU's memory less the context, never runs out (it releases cached segments and
retries before giving up, as PyTorch does). Every figure is a model, never a
measurement: records carry them in ``gpu_*`` fields, tables label them "model".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.memmodel.caching_allocator import CachingAllocator, OutOfMemory
from attnprof.profiler.memmodel.sdpa_choice import choose_sdpa_backend
from attnprof.profiler.memmodel.sdpa_kernels import (ALIAS, ALLOC, CPU_FLASH_FWD, FREE, OP, TIE, cublas_workspace_bytes,
                                                     substitute)
from attnprof.profiler.records import Point
from attnprof.profiler.units import printable

GPU_FIELDS = ("gpu", "gpu_sdpa_backend", "gpu_tensor_peak_bytes", "gpu_allocated_peak_bytes",
              "gpu_reserved_peak_bytes", "gpu_total_bytes", "gpu_fits", "gpu_note", "gpu_time_fwd_ms", "gpu_time_bwd_ms",
              "gpu_tokens_per_s")
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
@dataclass
class GpuPrediction:
    gpu: str
    sdpa_backend: str  # flash | efficient | cudnn | math | "" (the variant calls no SDPA)
    sdpa_reason: str
    tensor_peak_bytes: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    context_bytes: int
    total_bytes: int
    fits: bool
    memory_bytes: int
    cpu_tensor_peak_bytes: int  # the CPU kernels' tensor peak (= predicted_peak_bytes)
    cublas_workspaces: int = 0
    cublas_workspace_bytes: int = 0
    notes: list = field(default_factory=list)
    times: dict = field(default_factory=dict)  # gpu_time_fwd_ms, gpu_time_bwd_ms, gpu_tokens_per_s (profiler/timemodel)

    def fields(self) -> dict:
        """The record's gpu_* fields."""
        return {"gpu": self.gpu, "gpu_sdpa_backend": self.sdpa_backend,
                "gpu_tensor_peak_bytes": self.tensor_peak_bytes,
                "gpu_allocated_peak_bytes": self.allocated_peak_bytes,
                "gpu_reserved_peak_bytes": self.reserved_peak_bytes, "gpu_total_bytes": self.total_bytes,
                "gpu_fits": self.fits, "gpu_note": "; ".join(self.notes),
                **{k: self.times.get(k) for k in GPU_FIELDS[-3:]}}


def _has_sdpa(events: list) -> bool:
    return any(e[0] == OP and e[1].split(".", 1)[0] == CPU_FLASH_FWD for e in events)


class TraceCache:
    """Traces of one point, recorded once and shared by every GPU (and the math path once)."""

    def __init__(self):
        self._traces: dict = {}
        self._op_costs: dict = {}

    def op_costs(self, point: Point) -> list:
        """The point's op rows (accounting.predict, itself cached on disk): the time model's input."""
        from attnprof.profiler.measure.accounting import predict

        if point.key() not in self._op_costs:
            self._op_costs[point.key()] = predict(point).op_costs
        return self._op_costs[point.key()]

    def get(self, point: Point, sdpa_math: bool = False):
        from attnprof.profiler.gpu.trace import record_trace

        key = (point.key(), sdpa_math)
        if key not in self._traces:
            self._traces[key] = record_trace(point, sdpa_math=sdpa_math)
        return self._traces[key]


def predict_gpu(point: Point, gpu: GpuSpec, cache: Optional[TraceCache] = None) -> GpuPrediction:
    """The model's allocated, reserved and total peaks of ``point`` on ``gpu``."""
    cache = cache or TraceCache()
    trace = cache.get(point)
    cpu_peak = trace.tensor_peak_bytes  # the CPU kernels' peak: predicted_peak_bytes
    backend, reason = "", "the variant calls no scaled_dot_product_attention"
    if _has_sdpa(trace.events):
        shape = point.shape
        choice = choose_sdpa_backend(gpu, shape.dtype, shape.head_dim, requires_grad=not point.forward_only)
        backend, reason = choice.backend, choice.reason
        if backend == "math":
            trace = cache.get(point, sdpa_math=True)
    sub = substitute(trace.events, gpu, backend or "math")
    notes = list(sub.notes)
    if gpu.context_estimated:
        notes.append(f"CUDA context estimated at {gpu.context_bytes >> 20} MiB")
    workspaces = sum(1 for e in sub.events if e[0] == ALLOC and str(e[1]).startswith("cublas.workspace"))
    free = replay(sub.events, CachingAllocator())
    total = gpu.context_bytes + free.reserved_peak_bytes
    result, fits = free, True
    if total > gpu.memory_bytes:  # would it still fit, with PyTorch releasing its cache on OOM?
        try:
            result = replay(sub.events, CachingAllocator(capacity=max(0, gpu.memory_bytes - gpu.context_bytes)))
            notes.append(f"fits only by releasing cached segments ({result.retries}x)")
            total = gpu.context_bytes + result.reserved_peak_bytes
        except OutOfMemory as exc:
            fits, result = False, free
            notes.append(f"out of memory at {getattr(exc, 'op', '') or 'an allocation'}: "
                         f"figures are what it would need")
    from attnprof.profiler.timemodel.fields import gpu_time_fields

    times = gpu_time_fields(point, cache.op_costs(point), gpu, backend)
    return GpuPrediction(gpu.key, backend, reason, result.tensor_peak_bytes, result.allocated_peak_bytes,
                         result.reserved_peak_bytes, gpu.context_bytes, total, fits, gpu.memory_bytes,
                         cpu_peak, workspaces, cublas_workspace_bytes(gpu), notes, times)


# --- many points (api.predict) ------------------------------------------------------------------
def _point_job(job) -> list[dict]:
    point, gpus = job
    cache = TraceCache()
    return [predict_gpu(point, gpu, cache).fields() for gpu in gpus]


def _pool_map(fn, jobs: list) -> list:
    """``[fn(j) for j in jobs]`` over the CPU's cores, as every prediction (runner/predict.spread:
    fake tensors, no GPU)."""
    from attnprof.profiler.runner.predict import spread

    return spread(fn, jobs)


def add_gpu_fields(records: list[dict], points: list[Point], gpus: list[GpuSpec]) -> list[dict]:
    """One record per point x GPU: each prediction record with the model's gpu_* fields
    (None where the point was not predicted)."""
    by_key = {p.key(): p for p in points}
    todo = []
    for r in records:
        point = by_key.get(tuple(r.get(f) for f in _identity_fields()))
        todo.append(point if r.get("status") == "ok" and point is not None else None)
    results = _pool_map(_point_job, [(p, gpus) for p in todo if p is not None])
    out, it = [], iter(results)
    for r, point in zip(records, todo):
        per_gpu = next(it) if point is not None else [dict.fromkeys(GPU_FIELDS) | {"gpu": g.key} for g in gpus]
        out += [{**r, **fields} for fields in per_gpu]
    return out


def _identity_fields():
    from attnprof.profiler.records import IDENTITY_FIELDS

    return IDENTITY_FIELDS


def gpu_longest_fitting(scenario, gpus: list[GpuSpec], budget_bytes: Optional[int], start: int = 256,
                        limit: Optional[int] = None) -> list[dict]:
    """Per variant x mode x GPU: the longest power-of-two length whose modelled total
    (context + reserved) fits both the GPU (the allocator never runs out) and the budget."""
    from attnprof.profiler.runner.plan import series

    limit = limit or (1 << 20)
    templates = [points[0] for points in series(scenario.override(seq_lens=(start,)))]
    jobs = [(scenario, t, gpus, budget_bytes, start, limit) for t in templates]
    return [row for part in _pool_map(_series_fit, jobs) for row in part]


def gpu_capacity_predictions(scenario, gpus: list[GpuSpec], start: int = 16,
                             limit: Optional[int] = None) -> dict[tuple, dict]:
    """The model's figures at exactly the lengths that decide, per series and GPU, the
    longest power-of-two length that fits that GPU (the search ``gpu_longest_fitting``
    makes, without a budget): ``(gpu key, point.key_text()) -> gpu_* fields``. The
    report's capacity table reads these (``reports.capacity.add_gpu_predictions``), so its
    per-GPU figures are the model's, never extrapolations. Series run in parallel."""
    from attnprof.profiler.runner.plan import series

    limit = limit or (1 << 20)
    jobs = [(scenario, points[0], gpus, None, start, limit) for points in series(scenario)]
    return {key: value for part in _pool_map(_series_predictions, jobs) for key, value in part.items()}


def _series_predictions(job) -> dict[tuple, dict]:
    _, known = _series_search(job)
    return {(key, point.key_text()): p.fields() for n, (point, by_gpu) in known.items()
            if not isinstance(by_gpu, str) for key, p in by_gpu.items()}


def _series_fit(job) -> list[dict]:
    return _series_search(job)[0]


def _series_search(job) -> tuple[list[dict], dict]:
    """Rows of ``gpu_longest_fitting`` for one series, and what was predicted on the way:
    n -> (point, {gpu key: GpuPrediction} or the reason the variant refuses n)."""
    from attnprof.profiler.runner.plan import shape_at, shape_problem
    from attnprof.profiler.units import fmt_bytes

    scenario, template, gpus, budget_bytes, start, limit = job
    lengths = [start << i for i in range(64) if start << i <= limit]
    cache = TraceCache()
    known: dict = {}  # n -> {gpu key: GpuPrediction} or a refusal reason

    def point_at(n: int) -> Point:
        return replace(template, shape=shape_at(scenario, n))

    def at(n: int):
        if n not in known:
            point = point_at(n)
            problem = shape_problem(point)
            known[n] = problem or {g.key: predict_gpu(point, g, cache) for g in gpus}
        return known[n]

    accepted = [n for n in lengths if shape_problem(point_at(n)) is None]
    lengths = [n for n in lengths if n >= accepted[0]] if accepted else lengths
    rows = []
    for gpu in gpus:
        limit_bytes = min(gpu.memory_bytes, budget_bytes) if budget_bytes is not None else gpu.memory_bytes

        def fits(n: int) -> bool:
            r = at(n)
            return not isinstance(r, str) and r[gpu.key].fits and r[gpu.key].total_bytes <= limit_bytes

        lo, hi = -1, len(lengths)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(lengths[mid]) else (lo, mid)
        if hi == len(lengths):
            reason = f"search stopped at the limit of {limit} tokens"
        elif isinstance(at(lengths[hi]), str):
            reason = at(lengths[hi])
        else:
            p = at(lengths[hi])[gpu.key]
            reason = (f"{lengths[hi]} tokens would need {fmt_bytes(p.total_bytes)} in total (model)"
                      + ("" if p.fits else f", more than the {fmt_bytes(gpu.memory_bytes)} GPU"))
        row = {**template.identity(), "seq_len": None}
        if lo >= 0:
            best = lengths[lo]
            row = {**point_at(best).identity(), **at(best)[gpu.key].fields(),
                   "predicted_peak_bytes": at(best)[gpu.key].cpu_tensor_peak_bytes}
        rows.append({**row, "gpu": gpu.key, "budget_bytes": budget_bytes, "limit_bytes": limit_bytes,
                     "longest_fitting_seq_len": lengths[lo] if lo >= 0 else None, "limited_by": reason})
    return rows, {n: (point_at(n), r) for n, r in known.items()}


# --- printing -------------------------------------------------------------------------------------
def _table(head: list, rows: list) -> list[str]:
    rows = [[printable(c) for c in r] for r in rows]  # labels and GPU names: control characters spelled out
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [head, *rows]]


def format_gpu_table(records: list[dict]) -> str:
    """The model's figures, one line per point x GPU, never beside a measured column."""
    from attnprof.profiler.units import fmt_bytes

    head = ["variant", "mode", "seq_len", "batch", "gpu", "sdpa", "tensors", "allocated", "reserved", "total", "fits",
            "fwd", "bwd", "tokens/s"]
    rows = []
    for r in records:
        if r.get("gpu_total_bytes") is None:
            rows.append([str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]), str(r["gpu"])]
                        + ["-"] * 9)
            continue
        rows.append([str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]), r["gpu"],
                     r["gpu_sdpa_backend"] or "-", fmt_bytes(r["gpu_tensor_peak_bytes"]),
                     fmt_bytes(r["gpu_allocated_peak_bytes"]), fmt_bytes(r["gpu_reserved_peak_bytes"]),
                     fmt_bytes(r["gpu_total_bytes"]), "yes" if r["gpu_fits"] else "NO",
                     *_time_cells(r)])
    notes = dict.fromkeys(f"{r['gpu']}: {r['gpu_note']}" for r in records if r.get("gpu_note"))
    return "\n".join([MODEL_LABEL + "; total = CUDA context + reserved (what NVML would show); " + TIME_LABEL,
                      *_table(head, rows), *(printable(f"model note: {n}") for n in notes)])


TIME_LABEL = "fwd/bwd/tokens/s: step-time MODEL (roofline per op, profiler/timemodel)"


def _time_cells(r: dict) -> list[str]:
    from attnprof.profiler.units import fmt_ms

    tps = r.get("gpu_tokens_per_s")
    return [fmt_ms(r.get("gpu_time_fwd_ms"), "-"), fmt_ms(r.get("gpu_time_bwd_ms"), "-"),
            f"{tps:,.0f}" if tps is not None else "-"]


def format_gpu_budget_table(rows: list[dict]) -> str:
    from attnprof.profiler.units import fmt_bytes

    from attnprof.profiler.records import step_time_ms
    from attnprof.profiler.units import fmt_ms

    head = ["variant", "mode", "gpu", "limit", "longest_fit", "total_there", "step_there", "sdpa", "limited_by"]
    lines = [[str(r["variant"]), str(r["mode"]), r["gpu"], fmt_bytes(r["limit_bytes"]),
              str(r["longest_fitting_seq_len"] or "none"), fmt_bytes(r.get("gpu_total_bytes")),
              fmt_ms(step_time_ms(r.get("gpu_time_fwd_ms"), r.get("gpu_time_bwd_ms")), "-"),
              r.get("gpu_sdpa_backend") or "-", r["limited_by"]] for r in rows]
    return "\n".join([f"longest power-of-two length whose modelled GPU total fits ({MODEL_LABEL}); "
                      f"step_there: fwd + bwd there, {TIME_LABEL}", *_table(head, lines)])
