"""The GPU MEMORY MODEL: what a point needs on a named GPU (``profiler.hardware.gpus``),
from fake tensors on the CPU.

- ``caching_allocator``: a simulation of PyTorch's CUDA caching allocator.
- ``sdpa_choice``: which SDPA backend a GPU would pick for a point.
- ``trace``: a point's exact allocation/free sequence under fake tensors (measure/drive.py).
- ``gpu_peak``: the trace replayed through the allocator: a point's GPU peaks and total.
- ``gpu_format``: the GPU tables ``predict --gpu`` prints.
- ``sdpa_kernels``: what differs on a GPU: the SDPA backend's outputs, saved tensors and
  workspaces substituted for the CPU flash kernel's, cuBLAS and cuBLASLt workspaces
  (``blas_workspaces``).
- ``cuda_ops``: CUDA kernels that allocate otherwise than the CPU op, the reductions' staging
  buffers among them (``cuda_reduce``).

Every figure here is a *model* (predicted), never a measurement (that is
``profiler.gpumeasure``); docs/gpu.md says what it covers. Importing it imports no torch.
"""
