"""Measurement: exact tensor accounting (``tracker``), the fake-tensor prediction and the
real run of one workload (``accounting``, ``workload``), timing, FLOP counting, and the
GPU's allocator and NVML samplers (``gpu``)."""
