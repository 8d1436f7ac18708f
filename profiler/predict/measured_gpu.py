"""The GPU models held against points measured on a real GPU (issue 39).

``load_measured(path)`` reads a measurements file (``tests/data/h200-2026-12-04/points.json``:
each point's inputs and its MEASURED figures, never a model's answer; untrusted data, read as
JSON only) and ``compare(measured, gpu)`` predicts every point with the GPU memory and time
models (``gpu_points.predict_gpu``) and gives measured / model for allocated, reserved, NVML
process total and forward+backward time. ``scripts/gpu_models_vs_measured.py`` prints it; the
tests assert its bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from attnprof.errors import UserError
from attnprof.profiler.records import Point, Shape

FORMAT = "attnprof-gpu-measurements"


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
            shape = Shape(batch=r["batch"], seq_len=r["seq_len"], d_model=r["d_model"], heads=r["heads"],
                          layers=r["layers"], dtype=r["dtype"])
            point = Point(r["variant"], mode, r["scope"], shape)
        except (KeyError, TypeError, ValueError) as e:
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
