"""The GPU time model against the 14 timed points of the first real H200 (issue 39).

The measured figures (forward and backward medians of CUDA events, 2 warm-up and 5 timed
steps) are tests/data/h200-2026-12-04/points.json, copied from ../shared/gpu-runs/
h200-2026-12-04/ (its README.md names the run); the model's answers are computed here, never
stored. The bounds are the ones the model reaches today, not yet issue 39's (median
|measured/model - 1| <= 0.15, every point within 1.5x): before the mechanisms of issue 39 the
median ratio was 2.02 and the worst 3.59; docs/time-model.md ("Against a real H200") says
what is still missing and why.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.predict.measured_gpu import compare, load_measured
from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV

DATA = Path(__file__).resolve().parents[2] / "data" / "h200-2026-12-04" / "points.json"


@pytest.fixture(scope="module")
def timed():
    mp = pytest.MonkeyPatch()  # the model honours these where it runs; the measured run had none of them set
    for name in ("ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", *BLAS_ENV):
        mp.delenv(name, raising=False)
    try:
        yield _timed()
    finally:
        mp.undo()


def _timed():
    env, measured = load_measured(DATA)
    rows = compare([m for m in measured if m.time_fwd_ms is not None], get_gpu(env["gpu_table_key"]))
    return {r["point"]: r["time_ratio"] for r in rows}


def test_all_fourteen_timed_points_are_predicted(timed):
    assert len(timed) == 14 and all(r is not None for r in timed.values())


def test_the_model_is_nearer_the_h200_than_before_issue_39(timed):
    ratios = list(timed.values())
    assert statistics.median(abs(r - 1) for r in ratios) <= 0.5  # before: 1.02
    assert statistics.median(ratios) <= 1.5  # before: 2.02
    assert min(ratios) >= 1.0  # still optimistic everywhere: never slower than the GPU was


def test_every_point_but_the_host_bound_checkpointed_4k_is_within_2x(timed):
    # sdpa checkpoint 4K (2.0 ms forward + 6.1 ms backward for ~1.4 ms of kernels) waits on
    # torch.utils.checkpoint's Python, which the model does not cost (docs/time-model.md)
    far = {p for p, r in timed.items() if r > 2.0}
    assert far == {"sdpa model checkpoint bfloat16 n=4096"}
    assert timed["sdpa model checkpoint bfloat16 n=4096"] <= 3.2  # before: 3.59


def test_fused_attention_at_long_lengths_is_within_issue_39s_bound(timed):
    for mode in ("plain", "checkpoint"):  # cuDNN attention at 16K: within 15 % (the issue's bound)
        assert abs(timed[f"sdpa model {mode} bfloat16 n=16384"] - 1) <= 0.15
    assert timed["sdpa model plain bfloat16 n=8192"] <= 1.2
