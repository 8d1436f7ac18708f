"""A sweep's use of the time model: rates for its workers, and how long a point will take
before its series has measured any (the ETA and ``--point-timeout`` skipping).

- CPU, local executor: this machine is calibrated once, in the sweep's process, with the
  torch thread count of the timing pass; the ``Rates`` travel to the workers in their
  settings (``time_rates``) and every record gets ``predicted_time_fwd_ms`` / ``_bwd_ms``.
- CUDA, a GPU the table knows by its device name: the workers cost each point on that
  GPU's table entry (``time_gpu``), fused attention as the backend it would pick.
- Anything else (a Ray cluster's devices, an unknown GPU): no predicted times.

A failed calibration is one warning line; the sweep then predicts nothing and runs as before.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Optional

from attnprof.profiler.records import Point

# A point's wall time beyond its timed steps: fork, prediction, imports of lazy modules.
POINT_FIXED_S = 0.5
# The memory pass runs the step once more under the tensor tracker (slower than plain).
MEMORY_PASS_STEPS = 2
# Before a series has a measured point, the model's estimate must exceed --point-timeout
# this many times over to skip a point: a model may be off by that much, a measurement is not.
PREDICTED_TIMEOUT_MARGIN = 2.0


def timing_threads(settings) -> Optional[int]:
    """The torch threads a local CPU sweep's timing pass runs with (executors/local.py)."""
    if settings.threads:
        return settings.threads
    if settings.parallel and settings.parallel > 1:
        return max(1, (os.cpu_count() or 1) // settings.parallel)
    return None


def time_model_settings(settings, warn: Callable[[str], None]) -> dict:
    """What the workers need to predict times: {"time_rates": dict} (CPU), {"time_gpu": key}
    (a known GPU), or {} (no model for these devices)."""
    if settings.executor != "local":
        return {}
    if settings.device == "cpu":
        from attnprof.profiler.timemodel.machine import machine_rates

        rates = machine_rates(timing_threads(settings), warn=warn, announce=warn)
        return {"time_rates": rates.to_dict()} if rates is not None else {}
    from attnprof.profiler.hardware.gpus import by_device_name, load_gpus

    try:
        table = load_gpus()
    except Exception:  # noqa: BLE001 - a bad ATTNPROF_GPUS file: the sweep still runs, without times
        return {}
    spec = by_device_name(settings.device_name, table)
    if spec is None:
        warn(f"note: no time model for {settings.device_name or settings.device!r}: not in the GPU table "
             f"(attnprof gpus); records get no predicted times")
        return {}
    return {"time_gpu": spec.key}


def rates_for_point(settings: dict, point: Point):
    """The Rates a worker costs ``point`` with, or None."""
    from attnprof.profiler.timemodel.fields import rates_from_dict

    if settings.get("time_rates"):
        return rates_from_dict(settings["time_rates"])
    if settings.get("time_gpu"):
        from attnprof.profiler.hardware.gpus import get_gpu
        from attnprof.profiler.memmodel.gpu_peak import sdpa_choice
        from attnprof.profiler.timemodel.rates import gpu_rates

        gpu = get_gpu(settings["time_gpu"])
        return gpu_rates(gpu, sdpa_choice(point, gpu).backend)  # issue 24: autocast's dtype, grouped K/V
    return None


def add_prediction(record, point: Point, settings) -> None:
    """A record the sweep's process writes itself (a point not run, or one whose worker left
    none): the point's prediction, as the device runs it (issue 24). Built-in variants only: a
    plug-in's code runs in its point's own process, never in the process that holds every
    point's results (a plug-in that segfaults under fake tensors took the whole sweep down)."""
    from attnprof.profiler.measure.device_kernels import on_device
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.runner.failures import failure_reason
    from attnprof.scenarios.plan import shape_problem
    from attnprof.scenarios.variants.catalog import is_builtin_label

    if not is_builtin_label(point.variant) or shape_problem(point):
        return
    try:
        acc = predict(on_device(point, settings.device))
    except Exception as exc:  # noqa: BLE001 - a shape a variant refuses under fake tensors
        record.reason += f"; no prediction either: {failure_reason(exc)}"
        return
    record.predicted_peak_bytes, record.predicted_breakdown_bytes = acc.peak_bytes, acc.breakdown_bytes
    record.predicted_peak_op, record.predicted_peak_pass = acc.peak_op, acc.peak_pass  # issue 24: peak split
    record.flops_fwd, record.flops_bwd = acc.flops_fwd, acc.flops_bwd
    add_time_fields(record, point, acc.op_costs, settings.for_child())


def add_time_fields(record, point: Point, op_costs: list, settings: dict) -> None:
    """Set a record's predicted_time_fwd_ms / _bwd_ms by the model the sweep chose."""
    from attnprof.profiler.timemodel.fields import time_fields

    for name, value in time_fields(point, op_costs, rates_for_point(settings, point)).items():
        setattr(record, name, value)


def predicted_step_ms(point: Point, settings: dict) -> Optional[float]:
    """The model's forward + backward ms of ``point`` (its prediction is cached on disk, so
    the worker that measures it later reads it back), or None. None for a plug-in: its code
    runs in its point's own process only, where a crash or a hang costs that point alone
    (here it took the sweep down: a segfaulting plug-in, or one that sleeps past
    --point-timeout before its worker has started)."""
    from attnprof.profiler.measure.device_kernels import on_device
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.timemodel.fields import point_time
    from attnprof.scenarios.variants.catalog import is_builtin_label

    rates = rates_for_point(settings, point)
    if rates is None or not is_builtin_label(point.variant):
        return None
    try:
        t = point_time(point, predict(on_device(point, settings.get("device", "cpu"))).op_costs, rates)
    except Exception:  # noqa: BLE001 - a plug-in that breaks under fake tensors: its worker will say so
        return None
    return None if t is None else t.time_ms


def point_seconds(step_ms: float, settings: dict) -> float:
    """A point's wall time from its step time: warm-up and timed steps, the memory pass."""
    steps = settings.get("warmup", 1) + settings.get("repeats", 3) + MEMORY_PASS_STEPS
    return POINT_FIXED_S + steps * step_ms / 1e3


def interpolate_s(known: list[tuple[int, float]], n: int) -> Optional[float]:
    """Seconds at length ``n`` from estimates at other lengths of the same series: a power
    law through the two nearest (log-log), the value itself with one."""
    if not known:
        return None
    known = sorted(known)
    if len(known) == 1:
        return known[0][1]
    below = [k for k in known if k[0] <= n] or known[:1]
    above = [k for k in known if k[0] > n] or known[-1:]
    (n0, s0), (n1, s1) = (below[-1], above[0]) if below[-1] != above[0] else (known[-2], known[-1])
    if n0 == n1 or s0 <= 0 or s1 <= 0:
        return s0
    slope = math.log(s1 / s0) / math.log(n1 / n0)
    return s0 * (n / n0) ** slope
