"""The GPU memory model of an autocast point (issue 24): SDPA's backend is chosen for the
dtype the traced SDPA ran in (autocast's), not the float32 parameters'; the note says the
trace follows CUDA autocast's op lists (profiler/measure/cuda_autocast.py)."""

from __future__ import annotations

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.gpu_peak import gpu_memory
from attnprof.profiler.records import Point, Shape


def point(**kw) -> Point:
    return Point("sdpa", "plain", "model", Shape(batch=1, seq_len=128, d_model=64, heads=2, layers=1, **kw))


@pytest.mark.slow
def test_sdpa_is_chosen_for_the_autocast_dtype():
    gpu = get_gpu("h100-sxm")
    amp = gpu_memory(point(autocast="bfloat16"), gpu)
    assert amp.sdpa_backend == gpu_memory(point(dtype="bfloat16"), gpu).sdpa_backend
    assert amp.sdpa_backend != gpu_memory(point(), gpu).sdpa_backend  # float32 q would rule flash/cudnn out
    assert any("CUDA autocast's op lists" in note for note in amp.notes)
    assert not any("autocast" in note for note in gpu_memory(point(), gpu).notes)
