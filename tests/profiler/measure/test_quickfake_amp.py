"""QuickFakeTensorMode under torch.autocast (issue 24): autocast runs above the fake mode, so
the fake mode sees the lowered ops (the casts, the low-precision kernels); a quick fake run of
an autocast point records exactly what a plain FakeTensorMode run records, event by event
(but for the order of the frees when the autocast region exits: see ``frees_as_sets``)."""

from __future__ import annotations

import pytest
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.quickfake import QuickFakeTensorMode
from attnprof.profiler.measure.tracker import FREE
from attnprof.profiler.records import Point, Shape


def frees_as_sets(trace: list) -> list:
    """The trace with each run of consecutive frees as a set: autocast's weight cache is a hash
    map keyed by tensor address, so the order in which its exit frees the copies (all at once,
    nothing allocated in between: the same peak, the same live set after) follows addresses."""
    out, batch = [], set()
    for event in trace:
        if event[0] == FREE:
            batch.add(event)
            continue
        if batch:
            out.append(frozenset(batch))
            batch = set()
        out.append(event)
    return out + ([frozenset(batch)] if batch else [])


def recorded(point: Point) -> tuple:
    traced = trace_point(point, marks=True)
    return (frees_as_sets(traced.trace), traced.flops, traced.io, traced.reads, traced.peak_bytes,
            traced.categories)


@pytest.mark.parametrize("mode,autocast", [("checkpoint", "bfloat16"), ("reversible", "float16")])
def test_a_quick_fake_autocast_run_records_what_a_plain_one_does(mode, autocast, monkeypatch):
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    memo = QuickFakeTensorMode.swap_memo({})
    try:
        point = Point("sdpa", mode, "model", Shape(batch=2, seq_len=256, d_model=32, heads=4, layers=3,
                                                   autocast=autocast))
        quick = recorded(point)
        FakeTensorMode.cache.clear()
        monkeypatch.setattr(QuickFakeTensorMode, "enabled", False)
        assert recorded(point) == quick
        assert "autocast_copies" in quick[-1].values()
    finally:
        QuickFakeTensorMode.swap_memo(memo)
