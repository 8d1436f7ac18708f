"""Measuring a REAL GPU: which devices there are (``devices``, asked without initialising
CUDA), the driver's view of memory (``nvml``), a point's memory pass (``allocator_pass``),
a device's facts (``gpu_facts``) and which SDPA kernel ran (``sdpa_spy``).

Every figure here is measured, never modelled (the model is ``profiler.memmodel``).
Importing this package changes nothing in the environment: the device order is set by an
explicit call (``devices.prefer_pci_bus_order``) where a sweep starts."""
