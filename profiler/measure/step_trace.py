"""The optimizer step alone (issue 24): fake parameters of given layouts, their gradients
and the point's optimizer, primed, run through ``drive``'s step pass under the tracer.

What a step allocates and frees depends only on the parameters, their gradients and its
states, never on the sequence: so the depth composition (profiler/predict/compose_step.py)
runs the step of a deep stack here, at full depth, in a few foreach ops (or one loop per
parameter), instead of tracing every block's forward and backward.
"""

from __future__ import annotations

from typing import Optional

import torch

from attnprof.profiler.measure.drive import Tracer, fake_mode, step_pass, track_model_states
from attnprof.profiler.measure.fakemode import light_dynamo
from attnprof.profiler.measure.optimizer import build, states
from attnprof.profiler.measure.workload import Workload, mixed_precision
from attnprof.profiler.records import Point
from attnprof.profiler.safe_points import deferring


class StepOnly:
    """Fake parameters, their gradients, the point's optimizer (primed) and, for amp-fp16,
    its GradScaler, and nothing else: what ``drive``'s step pass touches, as ``Workload``
    offers it; ``update`` is ``Workload.update`` itself (the unscale, the step, the scale's
    update, ``zero_grad``)."""

    def __init__(self, point: Point, layouts: list, impl_device: str):
        self.params = [torch.empty_strided(shape, stride, dtype=dtype, requires_grad=True)
                       for shape, stride, dtype, _ in layouts]
        self.optimizer = build(point, self.params, impl_device)
        self.states_of = lambda p: states(self.optimizer, p)
        _, self.scaler = mixed_precision(point, torch.device(impl_device))
        for p, (_, _, dtype, grad) in zip(self.params, layouts):
            if grad is not None:
                p.grad = torch.empty_strided(*grad, dtype=dtype)  # held by its parameter only: zero_grad frees it

    update = Workload.update


@deferring  # Ctrl-C and SIGTERM wait for a safe point (profiler/safe_points.py)
def trace_step(point: Point, layouts: list, *, count_flops: bool = True, impl_device: str = "cpu",
               mode: Optional[type] = None) -> tuple:
    """The optimizer step of ``point`` over parameters of these layouts alone, under
    FakeTensorMode with the tracer, as ``drive`` runs it after backward: (the tracer, the
    trace position where the step starts). What it allocates and frees depends only on the
    parameters, their gradients and states (the composition, profiler/predict/compose_step.py,
    runs it at full depth)."""
    with light_dynamo(), fake_mode(mode):
        work = StepOnly(point, layouts, impl_device)
        tracer = Tracer(count_flops)
        with tracer:
            track_model_states(tracer, work, work.params)
            tracer.mark_gradients([p.grad for p in work.params if p.grad is not None])
            start = len(tracer.trace)
            step_pass(work, tracer)
    return tracer, start
