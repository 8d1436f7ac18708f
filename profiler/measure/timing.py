"""Forward/backward timing on CPU and GPU, and the median/IQR summary of the samples.

Both timers share one signature so a point's timing pass need not branch on the device:
warm-up iterations first (allocator growth, kernel autotuning and lazy init happen
there), then ``repeats`` timed iterations, each kept as a raw sample. A single run is
never reported: callers keep the samples and derive median and spread
(``summarize``), flagging noisy points the way torch.utils.benchmark does.

Memory is measured in its own pass (profiler/gpumeasure/allocator_pass.py), never during this loop.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

NOISY_IQR_RATIO = 0.1  # torch.utils.benchmark warns above IQR/median = 0.1

Forward = Callable[[], object]  # returns the loss handed to backward
Backward = Optional[Callable[[object], None]]  # None: forward-only point


def _check(warmup: int, repeats: int) -> None:
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")


def cpu_time(forward: Forward, backward: Backward, warmup: int, repeats: int,
             device: object = "cpu") -> tuple[list[float], list[float]]:
    """Forward and backward wall times in ms, one per repeat (``time.perf_counter``).

    CPU ops are synchronous, so the wall clock around each call is the op time.
    ``device`` is accepted for signature parity with ``cuda_time`` and ignored.
    """
    _check(warmup, repeats)
    for _ in range(warmup):
        loss = forward()
        if backward is not None:
            backward(loss)
        del loss  # free the graph before the next forward
    fwd_ms: list[float] = []
    bwd_ms: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loss = forward()
        t1 = time.perf_counter()
        fwd_ms.append((t1 - t0) * 1e3)
        if backward is not None:
            t2 = time.perf_counter()
            backward(loss)
            bwd_ms.append((time.perf_counter() - t2) * 1e3)
        del loss
    return fwd_ms, bwd_ms


def cuda_time(forward: Forward, backward: Backward, warmup: int, repeats: int,
              device: object = "cuda") -> tuple[list[float], list[float]]:
    """Forward and backward GPU times in ms, one per repeat, from CUDA events.

    Kernel launches are asynchronous: a host clock would time the launch, not the
    work. Events recorded on the stream around each phase time the work itself; we
    synchronize once per repeat (after both phases) and read ``elapsed_time`` then,
    so the host never stalls between forward and backward.
    """
    import torch

    _check(warmup, repeats)
    dev = torch.device(device)
    with torch.cuda.device(dev):
        for _ in range(warmup):
            loss = forward()
            if backward is not None:
                backward(loss)
            del loss
        torch.cuda.synchronize(dev)
        fwd_ms: list[float] = []
        bwd_ms: list[float] = []
        for _ in range(repeats):
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start.record()
            loss = forward()
            mid.record()
            if backward is not None:
                backward(loss)
                end.record()
            del loss
            torch.cuda.synchronize(dev)
            fwd_ms.append(float(start.elapsed_time(mid)))
            if backward is not None:
                bwd_ms.append(float(mid.elapsed_time(end)))
    return fwd_ms, bwd_ms


def summarize(samples: list[float]) -> tuple[Optional[float], Optional[float]]:
    """(median, interquartile range) of raw samples; (None, None) when there are none.

    Median and IQR rather than mean and stdev: one slow outlier (a GC pause, a
    clock ramp) moves neither. Quartiles use the ``inclusive`` method, which is
    numpy's default linear interpolation, the one torch.utils.benchmark reports.
    """
    data = [float(x) for x in samples]
    if not data:
        return None, None
    median = statistics.median(data)
    if len(data) < 2:
        return median, 0.0
    q1, _, q3 = statistics.quantiles(data, n=4, method="inclusive")
    return median, q3 - q1


def is_noisy(median: Optional[float], iqr: Optional[float]) -> bool:
    """True when IQR/median exceeds NOISY_IQR_RATIO: the point's time is not to be trusted."""
    if median is None or iqr is None or median <= 0:
        return False
    return iqr / median > NOISY_IQR_RATIO
