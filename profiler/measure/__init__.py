"""Measurement on the CPU: exact tensor accounting (``tracker``), the fake-tensor prediction and the
real run of one workload (``accounting``, ``workload``), timing (``timing``), FLOP counting, and
the host's facts (``host``). Measuring a real GPU is ``profiler.gpumeasure``."""
