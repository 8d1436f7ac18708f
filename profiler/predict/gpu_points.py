"""The GPU memory model over many points (``attnprof predict --gpu``, the report's
capacity figures): each prediction record with its gpu_* fields, the longest
power-of-two length that fits a GPU (the one search: search.py), and the model's
figures at the lengths that decide it; over the worker pool (pool.py). One point on one
GPU is profiler/memmodel/gpu_peak.py, plus its step time here (``predict_gpu``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler.hardware.checked import FIELD as CHECKED, how_sure
from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS, GpuPrediction, TraceCache, gpu_memory
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.predict.pool import spread
from attnprof.profiler.predict.search import longest_index
from attnprof.profiler.records import Point
from attnprof.profiler.failure_text import failure_reason


def predict_gpu(point: Point, gpu: GpuSpec, cache: Optional[TraceCache] = None,
                limit_bytes: Optional[int] = None) -> GpuPrediction:
    """The model's allocated, reserved and total peaks of ``point`` on ``gpu``
    (memmodel.gpu_peak.gpu_memory; ``limit_bytes``: a budget that caps the allocator), with
    its step time on that GPU (the time model, from the point's op rows: fake_run.predict,
    itself cached on disk)."""
    from attnprof.profiler.timemodel.fields import gpu_time_fields

    cache = cache or TraceCache()
    prediction = gpu_memory(point, gpu, cache, limit_bytes)
    # issue 24: its step as that GPU runs it (optimizer_impl "" is foreach on CUDA, the for-loop on the CPU)
    op_costs = cache.memo("op_costs", point, lambda p: predict(on_device(p, "cuda")).op_costs)
    prediction.times = gpu_time_fields(point, op_costs, gpu, prediction.sdpa_backend)
    return prediction


GPU_STATUS = "gpu_status"  # "error" in a record whose GPU model failed (its gpu_note says why); absent otherwise


def _point_job(job) -> list[dict]:
    point, gpus = job
    cache = TraceCache()
    return [_gpu_fields(point, gpu, cache) for gpu in gpus]


def _gpu_fields(point: Point, gpu: GpuSpec, cache: TraceCache) -> dict:
    """One point's gpu_* fields on ``gpu``; where the model's trace fails (a plug-in's bug, or
    attnprof's), none, with ``gpu_status`` "error" and ``gpu_note`` saying why: the point's CPU
    status and figures, and the other points, keep theirs."""
    try:
        return {**predict_gpu(point, gpu, cache).fields(), CHECKED: how_sure(point.identity(), gpu)}
    except UserError:
        raise
    except Exception as exc:  # the point's CPU figures and status stand; its GPU row says why it has none
        return {**dict.fromkeys(GPU_FIELDS), "gpu": gpu.key, CHECKED: "", GPU_STATUS: "error",
                "gpu_note": f"GPU model failed: {failure_reason(exc)}"}


def add_gpu_fields(records: list[dict], points: list[Point], gpus: list[GpuSpec]) -> list[dict]:
    """One record per point x GPU: each prediction record with the model's gpu_* fields
    (None where the point was not predicted) and ``gpu_checked``: how close the model came
    on a real GPU for points like it, or why it was never checked (hardware/checked.py)."""
    by_key = {p.key(): p for p in points}
    todo = []
    for r in records:
        point = by_key.get(tuple(r.get(f) for f in _identity_fields()))
        todo.append(point if r.get("status") == "ok" and point is not None else None)
    results = spread(_point_job, [(p, gpus) for p in todo if p is not None])
    out, it = [], iter(results)
    for r, point in zip(records, todo):
        per_gpu = (next(it) if point is not None else
                   [dict.fromkeys(GPU_FIELDS) | {"gpu": g.key, CHECKED: ""} for g in gpus])
        out += [{**r, **fields} for fields in per_gpu]
    return out


def _identity_fields():
    from attnprof.profiler.records import IDENTITY_FIELDS

    return IDENTITY_FIELDS


def gpu_longest_fitting(scenario, gpus: list[GpuSpec], budget_bytes: Optional[int], start: int = 256,
                        limit: Optional[int] = None) -> list[dict]:
    """Per variant x mode x GPU: the longest power-of-two length whose modelled total
    (context + reserved) fits both the GPU and the budget: the allocator, capped at the
    budget as ``set_per_process_memory_fraction`` caps it, never runs out (gpu_memory)."""
    from attnprof.scenarios.plan import series

    limit = limit or (1 << 20)
    templates = [points[0] for points in series(scenario.override(seq_lens=(start,)))]
    jobs = [(scenario, t, gpus, budget_bytes, start, limit) for t in templates]
    return [row for part in spread(_series_fit, jobs) for row in part]


def gpu_capacity_predictions(scenario, gpus: list[GpuSpec], start: int = 16,
                             limit: Optional[int] = None) -> dict[tuple, dict]:
    """The model's figures at exactly the lengths that decide, per series and GPU, the
    longest power-of-two length that fits that GPU (the search ``gpu_longest_fitting``
    makes, without a budget): ``(gpu key, point.key_text()) -> gpu_* fields``. The
    report's capacity table reads these (``reports.capacity.add_gpu_predictions``), so its
    per-GPU figures are the model's, never extrapolations. Series run in parallel."""
    from attnprof.scenarios.plan import series

    limit = limit or (1 << 20)
    jobs = [(scenario, points[0], gpus, None, start, limit) for points in series(scenario)]
    return {key: value for part in spread(_series_predictions, jobs) for key, value in part.items()}


def _series_predictions(job) -> dict[tuple, dict]:
    _, known = _series_search(job)
    return {(key, point.key_text()): p.fields() for n, (point, by_gpu) in known.items()
            if not isinstance(by_gpu, str) for key, p in by_gpu.items()}


def _series_fit(job) -> list[dict]:
    return _series_search(job)[0]


def _series_search(job) -> tuple[list[dict], dict]:
    """Rows of ``gpu_longest_fitting`` for one series, and what was predicted on the way:
    n -> (point, {gpu key: GpuPrediction} or the reason the variant refuses n)."""
    from attnprof.scenarios.plan import shape_at, shape_problem
    from attnprof.profiler.units import fmt_bytes

    scenario, template, gpus, budget_bytes, start, limit = job
    lengths = [start << i for i in range(64) if start << i <= limit]
    cache = TraceCache()
    known: dict = {}  # n -> {gpu key: GpuPrediction} or a refusal reason
    failed: dict = {}  # n -> why its prediction failed (also in known)

    def point_at(n: int) -> Point:
        return replace(template, shape=shape_at(scenario, n))

    def at(n: int):
        if n not in known:
            point = point_at(n)
            problem = shape_problem(point)
            try:
                known[n] = problem or {g.key: predict_gpu(point, g, cache, budget_bytes) for g in gpus}
            except UserError:
                raise
            except Exception as exc:  # read as "does not fit" by the search; the row says it was not predicted
                failed[n] = failure_reason(exc)
                known[n] = f"prediction failed: {failed[n]}"
        return known[n]

    accepted = [n for n in lengths if shape_problem(point_at(n)) is None]
    lengths = [n for n in lengths if n >= accepted[0]] if accepted else lengths
    rows = []
    for gpu in gpus:
        limit_bytes = min(gpu.memory_bytes, budget_bytes) if budget_bytes is not None else gpu.memory_bytes

        visited: set = set()  # the lengths this GPU's search asked for: only their failures are its own

        def fits(n: int) -> bool:
            visited.add(n)
            r = at(n)
            return not isinstance(r, str) and r[gpu.key].fits and r[gpu.key].total_bytes <= limit_bytes

        lo, hi = longest_index(len(lengths), lambda i: fits(lengths[i]))
        if hi == len(lengths):
            reason = f"search stopped at the limit of {limit} tokens"
        elif isinstance(at(lengths[hi]), str):
            reason = at(lengths[hi])
        else:
            p = at(lengths[hi])[gpu.key]
            reason = (f"{lengths[hi]} tokens would need {fmt_bytes(p.total_bytes)} in total (model)"
                      + ("" if p.fits else f", more than the {fmt_bytes(gpu.memory_bytes)} GPU"
                         if limit_bytes >= gpu.memory_bytes else f", more than the {fmt_bytes(limit_bytes)} budget"))
        row = {**template.identity(), "seq_len": None, CHECKED: ""}
        if lo >= 0:
            best = lengths[lo]
            row = {**point_at(best).identity(), **at(best)[gpu.key].fields(),
                   "predicted_peak_bytes": at(best)[gpu.key].traced_peak_bytes,
                   CHECKED: how_sure(point_at(best).identity(), gpu)}
        mine = [failed[n] for n in lengths if n in failed and n in visited]
        if mine:  # a length this search read as "does not fit" was in fact not predicted
            row.update(status="error", reason=mine[0])
            reason = f"prediction failed: {row['reason']}"
        rows.append({"status": "ok", "reason": "", **row, "gpu": gpu.key, "budget_bytes": budget_bytes, "limit_bytes": limit_bytes,
                     "longest_fitting_seq_len": lengths[lo] if lo >= 0 else None, "limited_by": reason})
    return rows, {n: (point_at(n), r) for n, r in known.items()}
