"""QuickFakeTensorMode: torch's fake-tensor dispatch with a memoised cache key. A fake run
through it records exactly what plain FakeTensorMode records; the memo is used; a quick
key that leaves out a field torch's key has is caught."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure import quickfake
from attnprof.profiler.measure.compose import trace_point
from attnprof.profiler.measure.quickfake import QuickFakeTensorMode
from attnprof.profiler.records import Point, Shape

POINTS = [Point(label, mode, "model", Shape(batch=2, seq_len=1024, d_model=64, heads=4, layers=3, dtype=dtype))
          for label, mode, dtype in [("sdpa", "checkpoint", "float32"), ("lsh[bucket_size=32]", "reversible", "bfloat16"),
                                     ("sparse_fixed[summary=4]", "plain", "float32"), ("talking_heads", "reversible",
                                                                                        "float32")]]


def recorded(point: Point) -> tuple:
    traced = trace_point(point, marks=True)
    return traced.trace, traced.flops, traced.io, traced.reads, traced.peak_bytes


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(QuickFakeTensorMode, "_quick_keys", {})


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p.variant}-{p.mode}")
def test_a_quick_fake_run_records_what_a_plain_one_does(point, monkeypatch, fresh_memo):
    quick = recorded(point)
    monkeypatch.setattr(QuickFakeTensorMode, "enabled", False)  # torch's own key for every op
    assert recorded(point) == quick


def test_the_memo_answers_repeated_ops(fresh_memo):
    before = QuickFakeTensorMode.quick_hits
    trace_point(POINTS[0], marks=True)
    assert QuickFakeTensorMode.quick_hits > before
    assert QuickFakeTensorMode._quick_keys


def test_mutation_a_quick_key_without_strides_is_caught(monkeypatch, fresh_memo):
    """Two clones of an 8x8 tensor, one transposed: the same quick key if strides were left
    out, so the second clone would get the first one's layout."""
    original = QuickFakeTensorMode._flatten

    def without_strides(self, out, value):
        if type(value).__name__ == "FakeTensor":
            out.extend((value.dtype, value.shape))
            return
        original(self, out, value)

    def layouts():
        with QuickFakeTensorMode():
            x = torch.empty(8, 8)
            return x.clone().stride(), x.t().clone().stride()

    assert layouts() == ((8, 1), (1, 8))
    monkeypatch.setattr(QuickFakeTensorMode, "_quick_keys", {})
    monkeypatch.setattr(QuickFakeTensorMode, "_flatten", without_strides)
    assert layouts() != ((8, 1), (1, 8))


def test_another_torch_gets_plain_fake_tensor_mode(monkeypatch):
    monkeypatch.setattr(FakeTensorMode, "_cache_key", lambda self, state, op, arguments, kw: None)
    assert not quickfake._supported()
