"""One point -> its predicted timeline: the ops in modelled time (steps.py) and the
allocator's actions (allocations.py), each event placed in an op, a pass and a period.

The trace is the full-depth fake run with the period marks (measure/drive.py
``trace_point(marks=True)``): the same events the composition of a deep stack composes
(predict/compose.py; the tests compare the two), and the op rows the time model costs.
With a GPU, the same trace goes through the GPU's kernels (memmodel/sdpa_kernels.py
``substitute``) and the caching-allocator simulation; where that GPU would run SDPA on its
math path the trace is recorded on that path instead (memmodel/trace.py), as
``gpu_peak.gpu_memory`` does, and its events are placed in the ops by their share of the
op sequence (said in the notes). Either way the GPU trace starts with what the device holds
uncounted (memmodel/trace.py ``held_parameters``: the one rule, which ``trace_point`` applies
to the workload it ran), so the timeline's peaks are ``gpu_memory``'s at every scope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.hardware.gpus import GpuSpec
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.measure.optimizer import on_the_device
from attnprof.profiler.measure.tracker import MARK, OP
from attnprof.profiler.records import Point
from attnprof.profiler.timeline.allocations import Allocations, simulated, synthetic
from attnprof.profiler.timeline.module_marks import module_marks, modules_of
from attnprof.profiler.timeline.steps import Steps, event_times, lay_out, op_ordinals, runs_of
from attnprof.profiler.timemodel.rates import Rates


@dataclass
class Timeline:
    """A point's predicted step, event by event."""

    point: Point
    steps: Steps
    allocations: Allocations
    events: list  # the source trace the allocations were made from
    op_of: list  # source position -> index into steps.ops (-1: setup)
    run_of: list  # source position -> (pass, period)
    time_us: list  # source position -> time (us) of the event there
    module_of: list  # source position -> the innermost module it runs in ("" outside any, and in backward)
    tensor_peak_bytes: int  # the tracker's peak (the CPU kernels'): the prediction's peak
    gpu: Optional[GpuSpec] = None
    sdpa_backend: str = ""
    notes: list = field(default_factory=list)


def point_timeline(point: Point, gpu: Optional[GpuSpec] = None, rates: Optional[Rates] = None) -> Timeline:
    """The timeline of ``point``: on ``gpu`` (its allocator simulated, its rates timing
    the ops), else synthetic addresses and ``rates`` (None: untimed, said in the notes)."""
    from attnprof.scenarios.variants.registry import spec_of, with_spec

    point = with_spec(point)
    held = None
    if gpu is not None:  # what the GPU memory model's trace holds beside the CPU trace: its one rule
        from attnprof.profiler.memmodel.trace import held_parameters as held
    with module_marks():  # issue 24: on a GPU, its optimizer implementation (foreach by default)
        traced = trace_point(point if gpu is None else on_device(point, "cuda"), marks=True, held=held)
    period = spec_of(point).layer_period()
    backend = ""
    if gpu is not None:
        from attnprof.profiler.memmodel.gpu_peak import sdpa_choice
        from attnprof.profiler.timemodel.rates import gpu_rates

        choice = sdpa_choice(point, gpu, traced.trace)  # the GPU memory model's own rule
        backend = choice.backend if choice is not None else ""
        rates = gpu_rates(gpu, backend or "flash")
    steps = lay_out(traced, rates, period)
    notes = list(steps.notes)
    if gpu is None:
        events, op_of, run_of = traced.trace, steps.op_of, steps.run_of
        allocations = synthetic(events, traced.categories)
    else:
        events, op_of, run_of, more = _gpu_events(point, traced, steps, gpu, backend)
        notes += more
        allocations = simulated(events, traced.categories)
    kinds = [e[0] in ("alloc", "free") for e in events]
    return Timeline(point, steps, allocations, events, op_of, run_of, event_times(op_of, kinds, steps),
                    modules_of(events), traced.peak_bytes, gpu, backend, notes)


def _gpu_events(point: Point, traced, steps: Steps, gpu: GpuSpec, backend: str) -> tuple:
    """The GPU's trace and, for each of its events, its op and its run."""
    from attnprof.profiler.memmodel.sdpa_kernels import substitute

    notes = []
    if backend == "math":
        from attnprof.profiler.memmodel.trace import record_trace

        marked = record_trace(point, sdpa_math=True).events
        notes.append("SDPA on the math path: its trace recorded apart, its events placed by op share")
    else:  # issue 24: the optimizer's host-resident counters take no device memory (as gpu_memory's trace)
        marked = list(traced.trace)
        marked.insert(traced.backward_at, (MARK, "backward"))  # where substitute's backward starts
        # issue 39: first, what the device holds uncounted (scope attention: the projections), as
        # memmodel/trace.py record_trace puts held_parameters' events first; placed in the setup
        marked = traced.held + on_the_device(marked, traced.host_serials)
    from attnprof.profiler.memmodel.gpu_peak import sdpa_dropout

    sub = substitute(marked, gpu, backend or "math", dropout=sdpa_dropout(point))  # the GPU model's own call
    events = sub.events
    notes += sub.notes
    back = next((i for i, e in enumerate(events) if e[0] == MARK and e[1] == "backward"), len(events))
    run_of = runs_of(events, back)
    ordinal = op_ordinals(events)
    traced_ops = [i for i, e in enumerate(traced.trace) if e[0] == OP]
    if backend != "math" and ordinal and ordinal[-1] == len(traced_ops):
        op_of = [steps.op_of[traced_ops[k - 1]] if k else -1 for k in ordinal]
    else:
        total = max(1, ordinal[-1] if ordinal else 1)
        op_of = [min(len(steps.ops) - 1, k * len(steps.ops) // total) if k else -1 for k in ordinal]
        if backend != "math":
            notes.append("the GPU trace's ops differ from the CPU's: events placed by op share")
    return events, op_of, run_of, notes
