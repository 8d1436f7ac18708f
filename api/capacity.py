"""The report's capacity predictions, made right after a sweep: the lengths that decide
its "longest length that fits" table, within a time budget."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from attnprof.api.overrides import Log, quiet as _quiet
from attnprof.arguments import checked
from attnprof.scenarios.scenario import Scenario

# Capacity predictions for the report (fake tensors): beyond this many seconds the report
# extrapolates the rest, marked '~'. The full set takes ~70 s on 2 cores; most of it
# goes to the longest lengths of the block-wise variants.
CAPACITY_SECONDS = 45.0


@checked
def capacity_for_report(sc: Scenario, out: Path, seconds: float = CAPACITY_SECONDS,
                        log: Log = _quiet, gpus: Sequence = ()) -> tuple[int, float]:
    """Predict, within about ``seconds``, the lengths that decide the report's "longest
    length that fits" table, so its figures are predictions rather than extrapolations.

    Series run in parallel (fake tensors, ~70 s for the whole default scenario on 2
    cores); what is unfinished when the time is up is left out, and the report marks
    those figures '~' (extrapolated). Returns (predictions made, seconds taken).
    ``gpus`` (GpuSpecs): model those GPUs instead of the generic budgets (the GPU memory
    model's figures, one per point and GPU, into the report's GPU cache file).
    """
    from attnprof.profiler.predict.curve import capacity_within
    from attnprof.reports.capacity import BUDGETS_GIB, add_gpu_predictions, add_predictions

    started = time.perf_counter()
    if seconds <= 0:
        return 0, 0.0
    if gpus:
        log(f"modelling the longest length that fits {', '.join(g.key for g in gpus)} for the report "
            f"(GPU memory model, at most ~{seconds:.0f} s) ...")
        entries = capacity_within(sc, tuple(BUDGETS_GIB), seconds, list(gpus))
        add_gpu_predictions(out, list(gpus), entries, warn=log)
    else:
        log(f"predicting the longest length that fits {min(BUDGETS_GIB)}-{max(BUDGETS_GIB)} GiB for the report "
            f"(fake tensors, at most ~{seconds:.0f} s) ...")
        entries = capacity_within(sc, tuple(BUDGETS_GIB), seconds)
        add_predictions(out, entries, warn=log)
    took = time.perf_counter() - started
    log(f"  {len(entries)} predictions in {took:.1f} s")
    return len(entries), took
