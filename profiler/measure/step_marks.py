"""The optimizer step, period by period (issue 24): the marks a traced run puts into a
for-loop optimizer's step, so the depth composition composes it as one more pass.

A for-loop optimizer (torch's ``_single_tensor_adam``/``_single_tensor_sgd``: one parameter
after another, in ``Module.parameters()`` order) steps period after period. Between the
optimizer's own step hooks (``register_step_pre_hook`` / ``register_step_post_hook``, public
torch API), the tracer calls ``before_op`` with each op's arguments; the first op that
touches a period's first parameter (the parameter, its gradient or one of its states: the
for-loop's first op on a parameter is its ``step`` counter) marks that period. After the
step the pass's epilogue is marked: ``zero_grad`` frees every period's gradients at once
(predict/compose_epilogue.py). Not a foreach or fused step (a few ops over every parameter
at once: compose_step.py runs those alone), nor one behind a GradScaler (its unscale reads
every gradient in one op, before the step).
"""

from __future__ import annotations

from typing import Callable

import torch

from attnprof.profiler.measure.optimizer import steps_one_by_one
from attnprof.profiler.measure.tracker import tensors_in


def marked(work) -> bool:
    """Whether ``work``'s step is marked period by period: a for-loop optimizer, no GradScaler."""
    optimizer = getattr(work, "optimizer", None)
    return (optimizer is not None and getattr(work, "scaler", None) is None
            and all(steps_one_by_one(g) for g in optimizer.param_groups))


def mark_step(work, groups: list, tracer, period: Callable[[int], None], epilogue: Callable[[], None]) -> list:
    """Hooks on ``work.optimizer`` that call ``period(k)`` before the first op of period k's
    parameters (``groups``: the parameters per period) and ``epilogue()`` after the step;
    their handles (to remove). Nothing where the step is not ``marked``."""
    if not marked(work):
        return []
    firsts: dict = {}  # storage -> the period whose first parameter it belongs to
    for k, group in enumerate(groups):
        if group:
            p = group[0]
            for t in [p, p.grad, *work.states_of(p)]:
                if isinstance(t, torch.Tensor):
                    firsts.setdefault(t.untyped_storage()._cdata, k)

    def before_op(args):
        for t in tensors_in(args):
            k = firsts.get(t.untyped_storage()._cdata)
            if k is not None:
                period(k)
                return

    def stepping(*_):
        tracer.before_op = before_op

    def stepped(*_):
        tracer.before_op = None
        epilogue()

    return [work.optimizer.register_step_pre_hook(stepping), work.optimizer.register_step_post_hook(stepped)]
