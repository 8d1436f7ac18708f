"""Autocast points through the depth composition (issue 24): exact at every depth. The
autocast weight cache is cleared when the forward's autocast region exits, freeing the casts
of every layer at once; the trace marks that moment (the forward's epilogue, drive.py) and
the composition frees, of every middle period, what the traced middle's epilogue frees.
Composed, every variant and mode equals the plain full-depth fake run to the byte, its
event sequence is the full run's (the order within one batch of frees aside: the cache is a
hash map), and the traced epilogue frees the same place of every period."""

from __future__ import annotations

import pytest

from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.tracker import FREE
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.compose import TRACED_PERIODS, Composition
from attnprof.profiler.predict.compose_epilogue import problem
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

MODES = ["plain", "checkpoint", "reversible"]


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def figures(acc) -> tuple:
    return (acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd, acc.peak_op,
            acc.peak_pass, acc.op_costs)


def point(mode: str, layers: int, label: str = "sdpa", autocast: str = "bfloat16", **options) -> Point:
    return Point(label, mode, "model", Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=layers,
                                             autocast=autocast, **options))


def check(p: Point):
    fast = predict(p)
    slow = account(p, fake=True, count_flops=True)
    assert figures(fast)[:7] == figures(slow)[:7], p
    assert fast.op_costs == trace_point(p).op_costs(), p
    return fast


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("autocast", ["bfloat16", pytest.param("float16", marks=pytest.mark.slow)])
def test_a_deep_autocast_stack_composes_exactly(mode, autocast):
    fast = check(point(mode, 5, autocast=autocast))
    assert fast.method == f"composed from L={TRACED_PERIODS}"


@pytest.mark.slow
@pytest.mark.parametrize("label", ["full", "lsh", "talking_heads", "sparse_strided", "sparse_fixed",
                                   "sliding_window[window=32]"])
@pytest.mark.parametrize("mode", MODES)
def test_every_variant_composes_under_autocast(label, mode):
    assert check(point(mode, 5, label)).method == f"composed from L={TRACED_PERIODS}"


@pytest.mark.slow
@pytest.mark.parametrize("layers", [4, 6, 9])
def test_every_depth_with_the_whole_step(layers):
    """AMP with AdamW, SwiGLU, RMSNorm, rope, GQA and the LM head: the step people run."""
    fast = check(point("checkpoint", layers, vocab=300, optimizer="adamw", mlp="swiglu", norm="rmsnorm",
                       rope=True, kv_heads=2, loss_chunks=2))
    assert fast.method == f"composed from L={TRACED_PERIODS}"


def test_an_interleaved_variant_composes_by_periods():
    fast = check(point("plain", 8, "sparse_strided[combine=interleaved]"))
    assert fast.method == f"composed from L={2 * TRACED_PERIODS}"


def _batched(events: list) -> list:
    """``events`` with each run of consecutive frees sorted (the order the cache frees in)."""
    out, batch = [], []
    for e in events + [None]:
        if e is not None and e[0] == FREE:
            batch.append(e)
            continue
        out += sorted(batch)
        batch = []
        if e is not None:
            out.append(e)
    return out


@pytest.mark.parametrize("mode", ["plain", "checkpoint"])
def test_the_composed_event_sequence_is_the_full_runs(mode):
    full = trace_point(point(mode, 6))
    comp = Composition.of(trace_point(point(mode, TRACED_PERIODS), marks=True))
    assert "fwd" in comp.epilogues
    events, _ = comp.events(6)
    assert _batched(events) == _batched(full.trace)


def test_the_traced_epilogue_frees_the_same_place_of_every_period():
    """What composing the epilogue relies on (compose_epilogue.problem): each middle storage
    it frees, it frees of the first and the last period too; without those it is refused."""
    comp = Composition.of(trace_point(point("plain", TRACED_PERIODS), marks=True))
    frees = comp.epilogues["fwd"].frees
    assert problem(frees, comp.runs, TRACED_PERIODS) == ""
    middle = next(ref for ref in frees if ref[1] == 1)
    assert "every period" in problem(frozenset(ref for ref in frees if ref[1] == 1 or ref[2] != middle[2]),
                                     comp.runs, TRACED_PERIODS)


def test_without_autocast_there_is_no_epilogue():
    comp = Composition.of(trace_point(point("plain", TRACED_PERIODS, autocast=""), marks=True))
    assert comp.epilogues == {}
