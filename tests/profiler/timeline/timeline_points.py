"""Small points and their timelines, shared by the timeline tests (each built once). Not
named conftest.py: tests/reports/ imports its own ``conftest`` by that name. The fixtures
(``small``, ``on_gpu``) are imported by the tests that use them."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.timemodel.rates import Rates

# a made-up CPU for the time model (no calibration needed): every op gets a duration
RATES = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"float32": 1e11, "bfloat16": 1e11},
              bandwidth_bytes_per_s=1e10, launch_overhead_s=2e-6, launch_overhead_bwd_s=3e-6,
              attention_efficiency={"float32": (0.5, 0.25), "bfloat16": (0.5, 0.25)})
HOSTILE = "full\x1b[2J\n\u202e/../../etc/passwd\x00"


def point(variant="full", mode="plain", scope="model", n=128, layers=2, dtype="float32", heads=2, d_model=32,
          forward_only=False, **later) -> Point:
    """``later``: the training-step Shape fields (issue 24: optimizer, autocast, ...)."""
    return Point(variant, mode, scope, Shape(seq_len=n, batch=1, d_model=d_model, heads=heads, layers=layers,
                                             dtype=dtype, **later), forward_only)


@functools.lru_cache(maxsize=None)
def timeline_of(p: Point, gpu_key: str = ""):
    from attnprof.profiler.timeline.build import point_timeline

    return point_timeline(p, gpu=get_gpu(gpu_key) if gpu_key else None, rates=None if gpu_key else RATES)


def hostile_gpu():
    return dataclasses.replace(get_gpu("h100-sxm"), key="h100\x1b[31m\n\u202e/../x")


@pytest.fixture
def small():
    return timeline_of(point())


@pytest.fixture
def on_gpu():
    return timeline_of(point("sdpa", dtype="bfloat16", d_model=64), "h100-sxm")
