"""The per-point GPU memory model's driver: ``trace`` records a point's exact allocation/free
sequence from fake tensors on the CPU; ``model`` substitutes the GPU's kernels
(``profiler.memmodel.sdpa_kernels``), replays it in the simulated caching allocator
(``profiler.memmodel.caching_allocator``) and reports allocated / reserved / total peaks.

Every figure here is a *model* (predicted), never a measurement (``profiler.gpumeasure``).
Importing this package imports no torch.
"""
