"""GPU memory before you rent one: a model of what a point needs on a named GPU.

- ``table``: the known GPUs as data (``gpus.toml``) plus the user's own files.
- ``allocator``: a simulation of PyTorch's CUDA caching allocator.
- ``trace``: the exact allocation/free sequence of a point, from fake tensors on the CPU.
- ``kernels``: what differs on a GPU: the SDPA backend's outputs, saved tensors and
  workspaces substituted for the CPU flash kernel's, cuBLAS workspaces, the CUDA context.
- ``model``: trace -> substituted -> replayed -> allocated / reserved / total peaks.

Every figure here is a *model* (predicted), never a measurement; docs/gpu.md says what
it covers and what it does not. Not to be confused with ``profiler/measure/gpu.py``,
which measures on a real GPU. Importing this package imports no torch.
"""
