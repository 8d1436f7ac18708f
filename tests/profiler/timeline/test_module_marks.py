"""Module marks: each event's innermost module, from marks the global hooks put in."""

import torch

from attnprof.profiler.measure.tracker import MARK, MemoryTracker
from attnprof.profiler.timeline.module_marks import MODULE_LABEL, module_marks, modules_of


def test_events_get_the_innermost_module_and_nothing_outside():
    events = [(MARK, (MODULE_LABEL, "blocks.0", True)), ("op", "a", None), (MARK, (MODULE_LABEL, "blocks.0.f", True)),
              ("op", "b", None), (MARK, (MODULE_LABEL, "blocks.0.f", False)), ("op", "c", None),
              (MARK, (MODULE_LABEL, "blocks.0", False)), ("op", "d", None)]
    assert [m for e, m in zip(events, modules_of(events)) if e[0] == "op"] == ["blocks.0", "blocks.0.f", "blocks.0", ""]


def test_the_hooks_mark_a_tracing_tracker_and_are_gone_after():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.ones(2, 4)
    with module_marks():
        with MemoryTracker(trace=True) as tracker:
            model(x)
    labels = [e[1] for e in tracker.trace if e[0] == MARK]
    assert (MODULE_LABEL, "0", True) in labels and (MODULE_LABEL, "1", False) in labels
    with MemoryTracker(trace=True) as after:
        model(x)
    assert not [e for e in after.trace if e[0] == MARK]
