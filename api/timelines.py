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


def write_run_timelines(sc, folder: Path, log=lambda line: None) -> list:
    """``sweep(timeline=True)``: the predicted timeline of each ok point of the run in ``folder``,
    into ``folder/timelines`` beside the real snapshots a CUDA sweep's workers wrote there. On
    CUDA the GPU model runs for the device's GPU table entry (by its name), where it has one;
    otherwise (a CPU, or an unknown GPU) the tensor tracker's timeline with this CPU's rates."""
    from attnprof.profiler.gpumeasure.memory_history import timelines_folder
    from attnprof.profiler.hardware.gpus import by_device_name
    from attnprof.profiler.measure.device_kernels import on_device
    from attnprof.profiler.records import key_of_record
    from attnprof.profiler.runner.storage import read_records
    from attnprof.profiler.timeline.files import write_point
    from attnprof.profiler.timemodel.machine import machine_rates
    from attnprof.scenarios.plan import series

    ok = {key_of_record(r): r for r in read_records(folder) if r.get("status") == "ok"}
    if not ok:
        return []
    target = timelines_folder(folder)  # a planted link there: refused, one line
    rates, paths = None, []
    for point in (p for s in series(sc) for p in s if p.key() in ok):
        record = ok[point.key()]
        on_cuda = record.get("device") == "cuda"
        gpu = by_device_name(record.get("device_name") or "") if on_cuda else None
        point = on_device(point, "cuda") if on_cuda else point  # the step CUDA ran, even without a table entry
        if gpu is None and rates is None:
            rates = machine_rates(measure=False)
        paths += write_point(target, point, gpu=gpu, rates=None if gpu is not None else rates)
    log(f"timelines: {len(paths)} predicted file(s) in {target}")
    return paths


@checked
def compare_timelines(predicted: PathLike, real: PathLike):
    """A predicted memory snapshot beside a real one (``profiler.timeline.snapshot_diff``):
    allocations counted, allocated and reserved peaks, the first event where they differ.
    Both are read as plain data only (never run: a planted pickle is refused in one line)."""
    from attnprof.profiler.timeline.plain_pickle import load_plain
    from attnprof.profiler.timeline.snapshot_diff import compare

    return compare(load_plain(predicted), load_plain(real))
