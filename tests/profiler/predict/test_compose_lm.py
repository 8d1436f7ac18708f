"""The depth composition with the language model's ends (issue 24): the embedding runs in
each pass's prologue, the head and the loss after the last period, and a tied weight's
gradient gathers from the backward's prologue (the head) and its period 0 (the
embedding). Composed, the prediction equals the plain full-depth fake run to the byte at
every depth and mode, and its event sequence is the full run's."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.compose import TRACED_PERIODS, Composition
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

MODES = ["plain", "checkpoint", "reversible"]
OPTIONS = {"vocab": dict(vocab=500), "chunks": dict(vocab=500, loss_chunks=4),
           "tied": dict(vocab=500, tie_embeddings=True), "tied-chunks": dict(vocab=500, tie_embeddings=True, loss_chunks=2)}


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    """Every prediction here takes the fake-tensor path the composition is part of."""
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


def point(mode: str, layers: int, label: str = "sdpa", **options) -> Point:
    return Point(label, mode, "model", Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=layers, **options))


def check(p: Point):
    fast, slow = predict(p), account(p, fake=True, count_flops=True)
    assert figures(fast) == figures(slow), p
    return fast


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("mode", MODES)
def test_the_lm_composes_to_the_byte(mode, name):
    fast = check(point(mode, 7, **OPTIONS[name]))
    assert fast.method == f"composed from L={TRACED_PERIODS}"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layers", [1, 2, 3, 4, 5, 6, 12])
def test_every_depth(mode, layers):
    fast = check(point(mode, layers, vocab=500, tie_embeddings=True, loss_chunks=2))
    assert fast.method.startswith("composed") == (layers > TRACED_PERIODS)


def test_an_interleaved_variant_composes_by_periods():
    fast = check(point("checkpoint", 8, "sparse_strided[combine=interleaved]", vocab=500, loss_chunks=2))
    assert fast.method == f"composed from L={2 * TRACED_PERIODS}"


@pytest.mark.parametrize("mode", MODES)
def test_the_composed_event_sequence_is_the_full_runs(mode):
    options = OPTIONS["tied-chunks"]
    full = trace_point(point(mode, 6, **options))
    comp = Composition.of(trace_point(point(mode, TRACED_PERIODS, **options), marks=True))
    events, flops = comp.events(6)
    want = [(e, full.flops.get(i, 0)) for i, e in enumerate(full.trace)]
    got = [(e, flops.get(i, 0)) for i, e in enumerate(events)]

    def costs(seq):  # see test_compose.py: a reversible backward's zero-cost detaches aside
        return [(e, f) for e, f in seq if e[0] in ("alloc", "free") or f or (e[0] == "op" and e[2] is not None)]

    assert costs(got) == costs(want)
    if mode != "reversible":
        assert got == want


@pytest.mark.parametrize("layers", [4, 5, 6])
def test_the_largest_storages_at_the_peak_tie_break_as_the_tracker_does(layers):
    """A tied reversible stack: at its peak, storages of equal size from several periods are
    live or freed, and the five largest listed must be the tracker's (a middle period's
    storage freed by the next middle copy is freed: compose._freed_before)."""
    fast = check(point("reversible", layers, **OPTIONS["tied"]))
    assert fast.method.startswith("composed")
    assert len({t["bytes"] for t in fast.largest_at_peak}) < len(fast.largest_at_peak)  # there are ties
