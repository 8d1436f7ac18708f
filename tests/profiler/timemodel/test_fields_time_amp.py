"""Under autocast (issue 24) the time model costs the matmuls at the autocast dtype's rate,
not the float32 parameters' (Shape.compute_dtype)."""

from __future__ import annotations

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.timemodel.fields import point_time
from attnprof.profiler.timemodel.rates import gpu_rates
from attnprof.profiler.timemodel.roofline import predict_time

ROWS = [["fwd", "mm.default", 10**12, 10**6, 10**6, 1]]  # a GEMM-bound step


def test_an_autocast_point_is_costed_at_the_autocast_dtype():
    rates = gpu_rates(get_gpu("h100-sxm"), "flash")
    amp = Point("sdpa", "plain", "model", Shape(autocast="bfloat16"))
    got = point_time(amp, ROWS, rates)
    assert got.time_ms == predict_time(ROWS, rates, "bfloat16").time_ms
    assert got.time_ms < point_time(Point("sdpa", "plain", "model", Shape()), ROWS, rates).time_ms
    assert Shape(autocast="float16").compute_dtype == "float16" and Shape().compute_dtype == "float32"
