"""The time model's record fields: ``predicted_time_*`` (the machine that measures) and
``gpu_time_*`` (a named GPU), from a point's op rows. None wherever the model has no
answer; never a guess."""

from __future__ import annotations

from typing import Optional

from attnprof.profiler.records import Point
from attnprof.profiler.timemodel.rates import Rates
from attnprof.profiler.timemodel.roofline import TimePrediction, predict_time

TIME_FIELDS = ("predicted_time_fwd_ms", "predicted_time_bwd_ms")
GPU_TIME_FIELDS = ("gpu_time_fwd_ms", "gpu_time_bwd_ms", "gpu_tokens_per_s")
DIGITS = 4  # ms to 0.1 us: the model is not that exact, the figure is not rounded twice


def rates_from_dict(data: Optional[dict]) -> Optional[Rates]:
    """Rates passed through a sweep's settings (a plain dict, so the manifest can hold it)."""
    if not data:
        return None
    return data if isinstance(data, Rates) else Rates(**data)


def _ms(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, DIGITS)


def point_time(point: Point, op_costs: list, rates: Optional[Rates]) -> Optional[TimePrediction]:
    # the matmuls' and attention's dtype: under autocast (issue 24) the low-precision one
    return predict_time(op_costs, rates, point.shape.compute_dtype, head_dim=point.shape.head_dim)


def time_fields(point: Point, op_costs: list, rates: Optional[Rates]) -> dict:
    """predicted_time_fwd_ms / predicted_time_bwd_ms on ``rates``' device."""
    t = point_time(point, op_costs, rates)
    if t is None:
        return dict.fromkeys(TIME_FIELDS)
    return {"predicted_time_fwd_ms": _ms(t.time_fwd_ms), "predicted_time_bwd_ms": _ms(t.time_bwd_ms)}


def gpu_time_fields(point: Point, op_costs: list, gpu, sdpa_backend: str = "") -> dict:
    """gpu_time_fwd_ms / gpu_time_bwd_ms / gpu_tokens_per_s on a GpuSpec, with fused attention
    costed as ``sdpa_backend`` (the one choose_sdpa_backend picks; "" when there is no SDPA)."""
    from attnprof.profiler.timemodel.rates import gpu_rates

    t = point_time(point, op_costs, gpu_rates(gpu, sdpa_backend or "flash"))
    if t is None:
        return dict.fromkeys(GPU_TIME_FIELDS)
    step_s = t.time_ms / 1e3
    return {"gpu_time_fwd_ms": _ms(t.time_fwd_ms), "gpu_time_bwd_ms": _ms(t.time_bwd_ms),
            "gpu_tokens_per_s": round(point.shape.tokens / step_s, 1) if step_s > 0 else None}
