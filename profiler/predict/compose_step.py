"""The optimizer step of a composed stack (issue 24): run at full depth, merged after the
composed backward, exactly.

The step pass touches every layer's parameters at once (a foreach op takes them all in one
list), so compose.py's checks would refuse it as a loop over every period. But what a step
allocates and frees depends only on the parameters, their gradients and states, never on
the sequence or the activations: ``measure/step_trace.trace_step`` runs it alone, on fake
parameters of the full-depth layouts (period 0's, the middle period's K-2 times, the last
period's with the final norm's: the order ``Module.parameters()`` gives), in a few foreach
ops or one loop per parameter, and memoised (a sweep over lengths pays once).

A for-loop step (torch's ``_single_tensor_*``: one parameter after another) is not run
here: ~12 fake ops per parameter at full depth would cost what the composition saves. The
traced run marks it period by period instead (measure/drive.py, ``Marks._mark_step``), and
compose.py composes it as one more pass ("step"), its ``zero_grad`` that pass's epilogue.
Only a for-loop step behind a GradScaler (amp-fp16: the unscale reads every gradient in
one op) comes here.

``StepSummary`` is what the merge needs of it, read the same way from the traced run's own
step pass (the identity check at the traced depth) and from the standalone one: its highest
point above its start (reached at an allocation), the category deltas then, its own storages
live then, and its op costs. The merged peak is the composed backward's end level plus that
top, where it is higher than the composed peak (the tracker's rule: the first strictly
higher). A step that frees a storage from before it ahead of its top (torch's do not: the
gradients go at ``zero_grad``, after the update) is refused (``NotComposable``): its top
would depend on which of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.measure.tracker import ALLOC, FREE, MARK, OP

_MEMO: dict = {}  # (optimizer, impl, layouts, count_flops) -> StepSummary
_MEMO_SIZE = 64


class StepNotComposable(Exception):
    """The step frees an older storage before its top (compose.py raises NotComposable)."""


@dataclass(frozen=True)
class StepSummary:
    top: Optional[int]  # the highest point above the step's start, at an allocation; None if it allocates nothing
    top_by: dict = field(default_factory=dict)  # category deltas up to the top
    live_at_top: tuple = ()  # (nbytes, category, origin) of its own storages live at the top, in allocation order
    flops: int = 0
    costs: dict = field(default_factory=dict)  # (op, flops, bytes read, bytes written) -> count


def summarise(trace: list, start: int, flops: dict, io: dict, categories: dict, origins: dict) -> StepSummary:
    """The step pass of a trace, from position ``start`` (after its mark) to the end."""
    own: dict = {}  # serial -> (nbytes, category, origin), in allocation order
    level, top, top_at, by, top_by = 0, None, -1, {}, {}
    older_freed_at: list = []
    total_flops, costs = 0, {}
    for at in range(start, len(trace)):
        event = trace[at]
        kind = event[0]
        if at in flops and kind != OP:
            total_flops += flops[at]
            _count(costs, (None, flops[at], 0, 0))
        if kind == ALLOC:
            nbytes, category = event[2], categories.get(event[1], "temporaries")
            own[event[1]] = (nbytes, category, origins.get(event[1]))
            level += nbytes
            by[category] = by.get(category, 0) + nbytes
            if top is None or level > top:
                top, top_at, top_by = level, at, dict(by)
        elif kind == FREE:
            if event[1] in own:
                nbytes, category, _ = own[event[1]]
                level -= nbytes
                by[category] = by.get(category, 0) - nbytes
            else:
                older_freed_at.append(at)
        elif kind == OP:
            total_flops += flops.get(at, 0)
            _count(costs, (event[1], flops.get(at, 0), *io.get(at, (0, 0))))
        elif kind != MARK:
            raise StepNotComposable(f"unknown trace event {kind!r}")
    if top is not None and any(at < top_at for at in older_freed_at):
        raise StepNotComposable("the optimizer step frees an older storage before its peak")
    live: dict = {}  # its own storages live at the top, in allocation order
    for at in range(start, top_at + 1):
        event = trace[at]
        if event[0] == ALLOC:
            live[event[1]] = own[event[1]]
        elif event[0] == FREE:
            live.pop(event[1], None)
    live_at_top = tuple(live.values())
    return StepSummary(top, top_by, live_at_top, total_flops, costs)


def full_depth(groups: list, k: int) -> list:
    """The parameter layouts of a k-period stack from the traced groups (first, middle, last)."""
    first, middle, last = groups
    return [*first, *middle * (k - 2), *last]


def at_depth(point, groups: list, k: int, *, count_flops: bool = True) -> StepSummary:
    """The step of the k-period stack, run alone at full depth (memoised)."""
    from attnprof.profiler.measure.step_trace import trace_step

    layouts = tuple(tuple(entry) for entry in full_depth(groups, k))
    key = (point.shape.optimizer, point.shape.optimizer_impl, layouts, count_flops)
    found = _MEMO.get(key)
    if found is None:
        tracer, start = trace_step(point, list(layouts), count_flops=count_flops)
        found = summarise(tracer.trace, start, tracer.flops, tracer.io, tracer.categories(), tracer.origins())
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        _MEMO[key] = found
    return found


def _count(counter: dict, key: tuple) -> None:
    counter[key] = counter.get(key, 0) + 1
