"""Which module each op of a traced step runs in: marks put into the tracer's trace as
each module's forward starts and ends ("blocks.3.f.fn.to_in"), read back as a module path
per event (``modules_of``).

The marks come from torch's global module hooks (``register_module_forward_pre_hook`` /
``register_module_forward_hook``), held only while one trace runs; they allocate nothing
and hold no tensor, and find the tracer as the dispatch mode in force. Names are the
qualified names of the first module called under the tracer (the workload's model).
Backward runs no module forward: there the period marks name the layer (steps.py); a
recompute (checkpoint, reversible) runs the forwards again and is named again.
"""

from __future__ import annotations

import contextlib

from attnprof.profiler.measure.tracker import MARK, MemoryTracker

MODULE_LABEL = "attnprof.module"  # label[0] of these marks: (MODULE_LABEL, name, entering)


def _tracer():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, MemoryTracker) and mode.trace is not None:
            return mode
    return None


@contextlib.contextmanager
def module_marks():
    """While in it, every module forward under a tracing tracker marks its start and end."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    names: dict = {}
    depth = [0]

    def enter(module, args):
        tracer = _tracer()
        if tracer is None:
            return
        if not names and depth[0] == 0:
            names.update({id(m): n for n, m in module.named_modules() if n})
        depth[0] += 1
        name = names.get(id(module))
        if name:
            tracer.mark((MODULE_LABEL, name, True))

    def leave(module, args, out):
        tracer = _tracer()
        if tracer is None:
            return
        depth[0] = max(0, depth[0] - 1)
        name = names.get(id(module))
        if name:
            tracer.mark((MODULE_LABEL, name, False))

    handles = [register_module_forward_pre_hook(enter), register_module_forward_hook(leave)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def modules_of(events: list) -> list:
    """The innermost module each event runs in ("" outside any), from the module marks."""
    stack: list = []
    out = []
    for e in events:
        if e[0] == MARK and isinstance(e[1], tuple) and e[1][:1] == (MODULE_LABEL,):
            _, name, entering = e[1]
            if entering:
                stack.append(name)
            elif name in stack:
                del stack[len(stack) - 1 - stack[::-1].index(name)]
        out.append(stack[-1] if stack else "")
    return out
