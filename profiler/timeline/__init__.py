"""PREDICTED TIMELINES of one point, in the viewers PyTorch users already open: a memory
snapshot (pytorch.org/memory_viz, ``torch.cuda._memory_viz``) and a Chrome trace-event
file (ui.perfetto.dev, chrome://tracing). docs/timelines.md says how to open them.

- ``steps``: the point's ops in order, each with its modelled duration (the time model),
  its pass and its layer period (the period marks of measure/drive.py).
- ``allocations``: the allocator's actions and segments: synthetic (one segment per
  storage) from the tensor tracker, or simulated (memmodel/caching_allocator.py) on a GPU.
- ``build``: a point -> both of them (``point_timeline``).
- ``memory_snapshot``, ``chrome_trace``: the two files' contents; ``files``: their names
  and writing them into a folder that is data (profiler/safeio.py).
- ``plain_pickle``, ``snapshot_diff``: reading a snapshot (untrusted: plain data only)
  and comparing a predicted one with a real one.

Every figure is a model, never a measurement. Above profiler.predict (it reads the
prediction and both models), below profiler.runner (a real GPU sweep writes its real
snapshot beside the predicted one).
"""
