"""The memory pass on a real GPU: run a point's step once and read the caching allocator's
peak (exact, what a point records: ``measured_by="cuda-allocator"``) beside NVML's polled
figures (nvml.py), which also see the CUDA context and the allocator's cache.

Runs in a point's own worker process, where CUDA may be initialised (docs/gpu.md).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Optional

import torch

from attnprof.profiler.gpumeasure.nvml import NvmlSampler


def _cuda_index(device: Any) -> int:
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dev.type != "cuda":
        raise ValueError(f"not a CUDA device: {device!r}")
    return dev.index if dev.index is not None else torch.cuda.current_device()


def cuda_memory_pass(step: Callable[[], None], device: Any, history: Optional[Any] = None) -> dict:
    """Run ``step`` once and return its allocator and NVML memory figures (PointRecord fields).

    The allocator cache is emptied and its peak reset first, so the peak is this
    step's alone. We synchronize inside the sampler: kernels run asynchronously, and
    the sampler must still be polling while they do. An exception in ``step`` (a
    CUDA OOM) propagates after the sampler has stopped; the caller records it.
    ``history`` (a memory_history.MemoryHistory, ``sweep --timeline``): the allocator's
    recorder runs around the step alone, after the reset, and its snapshot is taken after
    the last synchronize (the recorder allocates no device memory: the peak is unchanged).
    """
    index = _cuda_index(device)
    torch.cuda.synchronize(index)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(index)
    with history if history is not None else nullcontext(), NvmlSampler(index) as sampler:
        step()
        torch.cuda.synchronize(index)
    baseline, note = sampler.baseline_process_bytes, sampler.note
    if baseline is None and sampler.baseline_device_bytes is not None:
        baseline = sampler.baseline_device_bytes
        note = "; ".join(filter(None, [note, "baseline is device-wide"]))
    return {
        "measured_peak_bytes": int(torch.cuda.max_memory_allocated(index)),
        "cuda_reserved_peak_bytes": int(torch.cuda.max_memory_reserved(index)),
        "nvml_device_peak_bytes": sampler.peak_device_bytes,
        "nvml_process_peak_bytes": sampler.peak_process_bytes,
        "nvml_baseline_bytes": baseline,
        "nvml_note": note,
    }
