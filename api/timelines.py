"""Predicted timelines: writing them for ``predict(timeline=DIR)``, and
``compare_timelines`` (a predicted memory snapshot beside a real one)."""

from __future__ import annotations

from pathlib import Path

from attnprof.api.overrides import PathLike
from attnprof.arguments import checked


def write_timelines(result, folder: PathLike, specs: list) -> list:
    """Each ok point of ``result`` (a Predictions), on each GPU of ``specs`` (GpuSpecs; none:
    this CPU's time model): its two files in ``folder``; their paths, in order."""
    from attnprof.profiler.timeline.files import write_point
    from attnprof.profiler.timemodel.machine import machine_rates
    from attnprof.scenarios.plan import series

    rates = None if specs else machine_rates(measure=False)  # measured by predict already, cached
    points = [p for s in series(result.scenario) for p in s]
    from attnprof.profiler.records import key_of_record

    fits = {key_of_record(r) for r in result.records if r.get("status") == "ok"}
    paths: list = []
    for point in points:
        if point.key() not in fits:
            continue
        for gpu in specs or [None]:
            paths += write_point(Path(folder), point, gpu=gpu, rates=rates)
    return paths


@checked
def compare_timelines(predicted: PathLike, real: PathLike):
    """A predicted memory snapshot beside a real one (``profiler.timeline.snapshot_diff``):
    allocations counted, allocated and reserved peaks, the first event where they differ.
    Both are read as plain data only (never run: a planted pickle is refused in one line)."""
    from attnprof.profiler.timeline.plain_pickle import load_plain
    from attnprof.profiler.timeline.snapshot_diff import compare

    return compare(load_plain(predicted), load_plain(real))
