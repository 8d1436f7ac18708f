"""profiler/measure/timing.py: the CPU and CUDA timers, and the median/IQR summary.

The test at the end (marked ``gpu``) uses the real device and is skipped without one.
No test here asserts how long anything takes.
"""

from __future__ import annotations

import pytest
import torch

from attnprof.profiler.measure.timing import cpu_time, cuda_time, is_noisy, summarize


# --- timing --------------------------------------------------------------------------------
def test_cpu_time_returns_one_sample_per_repeat_after_warmup():
    counts = {"fwd": 0, "bwd": 0}

    def forward():
        counts["fwd"] += 1
        return torch.ones(4, requires_grad=True).sum()

    def backward(loss):
        counts["bwd"] += 1
        loss.backward()

    fwd, bwd = cpu_time(forward, backward, warmup=2, repeats=5)
    assert len(fwd) == len(bwd) == 5
    assert all(t >= 0 for t in fwd + bwd)
    assert counts == {"fwd": 7, "bwd": 7}


def test_cpu_time_forward_only_has_no_backward_samples():
    fwd, bwd = cpu_time(lambda: None, None, warmup=0, repeats=3)
    assert len(fwd) == 3 and bwd == []


def test_timers_reject_no_repeats():
    with pytest.raises(ValueError):
        cpu_time(lambda: None, None, warmup=0, repeats=0)


def test_summarize_median_and_iqr():
    assert summarize([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 2.0)  # quartiles 2 and 4
    assert summarize([1.0, 2.0, 3.0, 4.0]) == (2.5, 1.5)  # 1.75 .. 3.25
    assert summarize([7.0]) == (7.0, 0.0)
    assert summarize([]) == (None, None)


def test_noisy_flag_above_a_tenth():
    assert not is_noisy(*summarize([10.0, 10.1, 10.2, 10.3]))
    assert is_noisy(*summarize([10.0, 12.0, 14.0, 16.0]))
    assert not is_noisy(None, None)


# --- on a real GPU -------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_time_is_sane():
    a = torch.randn(4096, 4096, device="cuda", requires_grad=True)

    def forward():
        return (a @ a).square().mean()

    def backward(loss):
        loss.backward()
        a.grad = None

    fwd, bwd = cuda_time(forward, backward, warmup=2, repeats=5, device="cuda")
    print(fwd, bwd)
    assert len(fwd) == len(bwd) == 5
    assert all(t > 0 for t in fwd + bwd)  # CUDA events timed real work (no bound on how long: not a benchmark)
