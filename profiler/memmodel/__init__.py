"""The GPU memory MODEL: a point's fake-tensor trace replayed through a simulated CUDA
caching allocator (a model, never a measurement; measuring a real GPU is elsewhere)."""
