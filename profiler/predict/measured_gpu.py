"""The GPU models held against points measured on a real GPU (issue 39).

``load_measured(path)`` reads a measurements file (``tests/data/h200-2026-12-04/points.json``:
each point's inputs and its MEASURED figures, never a model's answer; untrusted data, read as
JSON only) and ``compare(measured, gpu)`` predicts every point with the GPU memory and time
models (``gpu_points.predict_gpu``) and gives measured / model for allocated, reserved, NVML
process total and forward+backward time. ``scripts/gpu_models_vs_measured.py`` prints it.
``claim_problems(check, ...)`` holds a check of profiler/hardware/checked.toml (what
``attnprof predict --gpu`` and the report say about how sure the models are) to those rows,
and ``claimed_ranges(rows)`` gives the ranges such a check may state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler.records import Point, Shape, with_identity_defaults

FORMAT = "attnprof-gpu-measurements"
RATIOS = ("allocated_ratio", "reserved_ratio", "total_ratio", "time_ratio")  # compare()'s measured / model


@dataclass(frozen=True)
class Measured:
    """One measured point: what ran, and what the GPU's allocator, NVML and CUDA events said."""

    point: Point
    source: str
    sdpa_backend: str  # the backend torch ran ("" when the point calls no SDPA)
    allocated_peak_bytes: int  # torch.cuda.max_memory_allocated
    reserved_peak_bytes: int  # torch.cuda.max_memory_reserved
    nvml_process_peak_bytes: Optional[int]  # NVML's figure for the process (context included)
    time_fwd_ms: Optional[float]  # median of the timed forward passes (CUDA events)
    time_bwd_ms: Optional[float]

    def label(self) -> str:
        p = self.point
        return f"{p.variant} {p.scope} {p.mode} {p.shape.dtype} n={p.shape.seq_len}"


def _int(v, what: str) -> Optional[int]:
    if v is None:
        return None
    if type(v) is not int or v < 0:
        raise UserError(f"measurements: {what} is not a whole number of bytes >= 0")
    return v


def _float(v, what: str) -> Optional[float]:
    if v is None:
        return None
    if type(v) not in (int, float) or not (0 < v < float("inf")):
        raise UserError(f"measurements: {what} is not a positive finite time")
    return float(v)


def shape_of_record(record: dict) -> Shape:
    """The Shape a result record or a measured point was made for: every Shape field it holds, a
    later one it lacks at its default (Shape checks each value: ShapeError, in one line)."""
    r = with_identity_defaults(record)
    return Shape(**{f.name: r[f.name] for f in fields(Shape) if f.name in r})


def load_measured(path: Path) -> tuple[dict, list[Measured]]:
    """(the environment it was measured in, the points) of a measurements file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"measurements: cannot read {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("points"), list):
        raise UserError(f"measurements: {path} is not an {FORMAT} file")
    out = []
    for i, r in enumerate(doc["points"]):
        what = f"point {i}"
        try:
            mode = r["mode"] if r["scope"] == "model" else "plain"
            # every Shape field the file holds: a point measured with RMSNorm, grouped KV heads or an
            # optimizer is modelled with them
            shape = shape_of_record(r)
            forward_only = r.get("forward_only", False)
            if not isinstance(forward_only, bool):
                raise ValueError("forward_only is not true or false")
            point = Point(r["variant"], mode, r["scope"], shape, forward_only)
        except (KeyError, TypeError, ValueError, UserError) as e:
            raise UserError(f"measurements: {what}: {e}") from None
        out.append(Measured(point, str(r.get("source", "")), str(r.get("measured_sdpa_backend") or ""),
                            _int(r.get("measured_allocated_peak_bytes"), what),
                            _int(r.get("measured_reserved_peak_bytes"), what),
                            _int(r.get("measured_nvml_process_peak_bytes"), what),
                            _float(r.get("time_fwd_ms"), what), _float(r.get("time_bwd_ms"), what)))
    return dict(doc.get("environment") or {}), out


def _ratio(measured, model) -> Optional[float]:
    return None if measured is None or not model else measured / model


def compare(measured: list[Measured], gpu) -> list[dict]:
    """One row per point: the model's figures on ``gpu`` (a GpuSpec) and measured / model."""
    from attnprof.profiler.memmodel.gpu_peak import TraceCache
    from attnprof.profiler.predict.gpu_points import predict_gpu

    rows = []
    cache = TraceCache()
    for m in measured:
        p = predict_gpu(m.point, gpu, cache)
        model_ms = None
        if p.times.get("gpu_time_fwd_ms") is not None and p.times.get("gpu_time_bwd_ms") is not None:
            model_ms = p.times["gpu_time_fwd_ms"] + p.times["gpu_time_bwd_ms"]
        measured_ms = None if m.time_fwd_ms is None or m.time_bwd_ms is None else m.time_fwd_ms + m.time_bwd_ms
        rows.append({
            "point": m.label(), "source": m.source,
            "sdpa_backend_model": p.sdpa_backend, "sdpa_backend_measured": m.sdpa_backend,
            "allocated_model_bytes": p.allocated_peak_bytes, "allocated_measured_bytes": m.allocated_peak_bytes,
            "allocated_ratio": _ratio(m.allocated_peak_bytes, p.allocated_peak_bytes),
            "reserved_model_bytes": p.reserved_peak_bytes, "reserved_measured_bytes": m.reserved_peak_bytes,
            "reserved_ratio": _ratio(m.reserved_peak_bytes, p.reserved_peak_bytes),
            "total_model_bytes": p.total_bytes, "total_measured_bytes": m.nvml_process_peak_bytes,
            "total_ratio": _ratio(m.nvml_process_peak_bytes, p.total_bytes),
            "time_model_ms": model_ms, "time_measured_ms": measured_ms,
            "time_ratio": _ratio(measured_ms, model_ms),
        })
    return rows


# --- the claims of profiler/hardware/checked.toml, held to the measured points ---------------
RATIO_FIELDS = {"allocated": "allocated_ratio", "reserved": "reserved_ratio", "total": "total_ratio",
                "time": "time_ratio"}


def _sizes(m: Measured) -> dict:
    s = m.point.shape
    return {"seq_len": s.seq_len, "batch": s.batch, "d_model": s.d_model, "heads": s.heads, "layers": s.layers,
            "d_ff": s.d_ff}


def claimed_ranges(rows: list[dict]) -> dict:
    """What checked.toml may claim from ``compare``'s rows: per figure, [lowest, highest]
    measured/model rounded outward to 2 decimals, and the median |time ratio - 1| rounded up."""
    import math
    import statistics

    out = {}
    for name, col in RATIO_FIELDS.items():
        values = [r[col] for r in rows if r[col] is not None]
        if values:
            out[name] = [math.floor(min(values) * 100) / 100, math.ceil(max(values) * 100) / 100]
    times = [abs(r["time_ratio"] - 1) for r in rows if r["time_ratio"] is not None]
    if times:
        out["time_median_off"] = math.ceil(statistics.median(times) * 100) / 100
    return out


def claim_problems(check, env: dict, measured: list[Measured], rows: list[dict]) -> list[str]:
    """Where a check (profiler/hardware/checked.py) says more than its measured points and
    the models' answers (``compare``'s rows) show: one line each; [] when it holds."""
    import statistics

    from attnprof.profiler.hardware.checked import SIZES, kind_of

    problems = []
    for name, key in (("device_name", "device_name"), ("gpu", "gpu_table_key"), ("torch", "torch")):
        if getattr(check, name) != str(env.get(key)):
            problems.append(f"{name} is {getattr(check, name)!r}, the measurements say {env.get(key)!r}")
    timed = [m for m in measured if m.time_fwd_ms is not None and m.time_bwd_ms is not None]
    if (check.points, check.timed_points) != (len(measured), len(timed)):
        problems.append(f"points {check.points}, timed {check.timed_points}; the file has {len(measured)}, "
                        f"{len(timed)} timed")
    for name, said, have in (("memory_kinds", check.memory_kinds, measured), ("time_kinds", check.time_kinds, timed)):
        kinds = {kind_of(m.point.identity()) for m in have}
        if set(said) != kinds:
            problems.append(f"{name} {sorted(said)} are not the kinds measured {sorted(kinds)}")
    for name in SIZES:
        values = [_sizes(m)[name] for m in measured]
        if values and tuple(check.sizes[name]) != (min(values), max(values)):
            problems.append(f"sizes.{name} {list(check.sizes[name])}; measured {min(values)}-{max(values)}")
    for name, col in RATIO_FIELDS.items():
        lo, hi = check.ratios[name]
        for r in rows:
            if r[col] is not None and not lo <= r[col] <= hi:
                problems.append(f"{r['point']}: {name} measured/model {r[col]:.3f} outside the claimed {lo}-{hi}")
    times = [abs(r["time_ratio"] - 1) for r in rows if r["time_ratio"] is not None]
    if times and statistics.median(times) > check.time_median_off:
        problems.append(f"median |time ratio - 1| {statistics.median(times):.3f} above the claimed "
                        f"{check.time_median_off}")
    return problems


def ratio_lines(rows: list[dict], gpu_key: str, source: str = "", width: int = 44) -> list[str]:
    """``compare``'s rows as text: a heading that says which figures are modelled, then one line
    per point (measured / model for each of RATIOS, the SDPA backend modelled / measured)."""
    where = f" ({source})" if source else ""
    lines = [f"measured / MODEL on {gpu_key} (allocated, reserved, NVML process total, fwd+bwd time): the "
             f"model's figures are modelled, the others measured{where}",
             f"{'point':<{width}} {'alloc':>7} {'resv':>7} {'nvml':>7} {'time':>7}  sdpa model/measured"]
    for r in rows:
        cells = " ".join(f"{r[c]:7.3f}" if r[c] is not None else f"{'-':>7}" for c in RATIOS)
        lines.append(f"{r['point'][:width]:<{width}} {cells}  "
                     f"{r['sdpa_backend_model'] or '-'}/{r['sdpa_backend_measured'] or '-'}")
    return lines
