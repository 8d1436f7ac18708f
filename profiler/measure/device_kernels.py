"""A point as a device runs it (issues 24, 39): what a CPU trace must follow to predict a GPU's step.

A GPU's prediction (the memory model, the GPU time model, the GPU timeline, a CUDA sweep's
predicted peak) is a trace on the CPU. Where the device's torch picks something else than the
CPU's, the trace must pick what the device picks:

- the optimizer step: ``optimizer_impl`` "" is torch.optim's default on the device (foreach on
  CUDA, the for-loop on the CPU: profiler/measure/optimizer.py), written out into the point, an
  identity field a user may also set;
- the kernels below the module: ``Point.kernels`` "cuda" makes the workload (measure/workload.py)
  run, on the CPU, the ops CUDA's torch runs where they allocate differently and the module
  cannot tell: RMSNorm's fused kernel (scenarios/stack/cuda_rms_norm.py), the composites' CUDA
  branches, dropout's fused kernel and SDPA's fused kernels with dropout (measure/cuda_branches.py),
  and autocast's CUDA op lists for a mixed-precision step (measure/cuda_autocast.py). Not
  identity: the same point, traced as another device runs it.
"""

from __future__ import annotations

from dataclasses import replace

from attnprof.profiler.measure.optimizer import default_impl


def on_device(point, device: str):
    """``point`` as ``device`` ("cuda", "cuda:1", "cpu") runs it: on a CUDA device its kernels
    CUDA's, and its ``optimizer_impl`` "" resolved to that device's default (an implementation
    named stays). The point itself on the CPU (a CPU trace already is the CPU's)."""
    kind = str(device).split(":")[0]
    if kind == "cpu":
        return point
    shape = point.shape
    if shape.optimizer != "none" and not shape.optimizer_impl:
        shape = replace(shape, optimizer_impl=default_impl(kind))
    return replace(point, shape=shape, kernels="cuda" if kind == "cuda" else point.kernels)
