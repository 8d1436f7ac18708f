"""How attnprof measures: exact tensor accounting, prediction, timing, GPU sampling, sweeps."""
