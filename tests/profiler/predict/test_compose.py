"""The fast prediction equals the plain full-depth fake run to the byte: peak, breakdown,
the largest storages at the peak and FLOPs, for every variant x mode x scope, several
depths, every option family and both dtype families; the composed event sequence equals
the full run's; a broken composition is caught (mutation tests); and what cannot be shown
composable runs every layer instead."""

from __future__ import annotations

import contextlib

import pytest

from attnprof.profiler.measure import drive
from attnprof.profiler.predict import fake_run
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.predict.compose import TRACED_PERIODS, Composition, NotComposable
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.variants.registry import parse_variant, variant_names

# Every built-in, and each option family: LSH rounds and bucket sizes (and the paper's
# variants of it), every Sparse Transformer combination, interleaved included.
LABELS = ["full", "sdpa", "sdpa[causal=false]", "talking_heads", "lsh[bucket_size=32]",
          "lsh[n_hashes=4,bucket_size=16]", "lsh[bucket_size=16,bucket_mask=true,dedup=true,lookback=within_round]",
          "sparse_strided", "sparse_fixed[summary=4]", "sparse_strided[combine=multihead]",
          "sparse_fixed[combine=multihead,summary=4]", "sparse_strided[combine=interleaved]",
          "sparse_fixed[combine=interleaved,summary=4]", "sliding_window[window=64]",
          "sliding_window[window=48,causal=false]"]
MODES = ["plain", "checkpoint", "reversible"]


@pytest.fixture(autouse=True)
def no_real_runs(monkeypatch):
    """These shapes are small enough to be run for real (test_small_points.py); here every
    prediction takes the fake-tensor path the composition is part of."""
    monkeypatch.setattr(fake_run, "SMALL_POINT_BYTES", 0)


def shape(layers: int, dtype: str = "float32", n: int = 256) -> Shape:
    return Shape(batch=2, seq_len=n, d_model=32, heads=4, layers=layers, dtype=dtype)


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


def assert_same(fast, slow, what) -> None:
    """The equality every test below relies on (and the mutation tests break on purpose)."""
    assert figures(fast) == figures(slow), f"{what}: fast {figures(fast)} != full-depth {figures(slow)}"


@contextlib.contextmanager
def own_dispatch_cache():
    """torch's fake-tensor dispatch cache is one dict for every FakeTensorMode: inside this
    block the plain run starts from an empty one, so it computes every op itself instead of
    reading what the fast path (QuickFakeTensorMode: its own keys and views) put there."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    shared = FakeTensorMode.cache
    FakeTensorMode.cache = {}
    try:
        yield
    finally:
        FakeTensorMode.cache = shared


def full_depth(point: Point):
    with own_dispatch_cache():
        return account(point, fake=True, count_flops=True)


def check(point: Point):
    """predict() against account(fake=True): the plain full-depth fake-tensor run."""
    fast, slow = predict(point), full_depth(point)
    assert_same(fast, slow, point)
    return fast


def label_or_skip(label: str) -> str:
    try:
        parse_variant(label)
    except Exception as exc:  # an option another change renamed: say so, do not hide it
        pytest.skip(f"{label}: {exc}")
    return label


def test_the_labels_cover_every_built_in_variant():
    assert {n for n in variant_names() if ":" not in n} <= {label.split("[")[0] for label in LABELS}


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("mode", MODES)
def test_every_variant_and_mode_composes_to_the_byte(label, mode):
    period = parse_variant(label_or_skip(label)).layer_period()
    point = Point(label, mode, "model", shape(7 * period))
    fast = check(point)
    assert fast.method == f"composed from L={TRACED_PERIODS * period}"
    assert fast.op_costs == trace_point(point).op_costs()  # every op, counted, as in the full-depth run


@pytest.mark.parametrize("label", LABELS)
def test_every_variant_at_scope_attention(label):
    assert check(Point(label_or_skip(label), "none", "attention", shape(1))).method == "exact"


@pytest.mark.parametrize("label", ["sdpa", "sparse_strided[combine=interleaved]"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layers", [1, 2, 3, 7, 12, 24])
def test_every_depth(label, mode, layers):
    period = parse_variant(label).layer_period()
    fast = check(Point(label, mode, "model", shape(layers)))
    composed = layers % period == 0 and layers // period > TRACED_PERIODS
    assert fast.method.startswith("composed") == composed  # shallow or odd stacks: every layer ran


@pytest.mark.parametrize("label", ["full", "lsh[bucket_size=32]", "sparse_fixed[summary=4]", "talking_heads"])
@pytest.mark.parametrize("mode", MODES)
def test_bf16(label, mode):
    check(Point(label, mode, "model", shape(12, "bfloat16")))


@pytest.mark.parametrize("label", ["sdpa", "lsh[bucket_size=32]", "sparse_strided[combine=interleaved]"])
@pytest.mark.parametrize("mode", MODES)
def test_forward_only(label, mode):
    period = parse_variant(label).layer_period()
    fast = check(Point(label, mode, "model", shape(5 * period), forward_only=True))
    assert fast.flops_bwd == 0 and fast.method.startswith("composed")


def test_batch_and_feed_forward_chunks():
    check(Point("sparse_fixed[summary=4]", "plain", "model",
                Shape(batch=3, seq_len=512, d_model=48, heads=6, layers=9, ff_chunks=4)))


@pytest.mark.parametrize("label", ["sdpa", "lsh[bucket_size=32]", "sparse_fixed[combine=interleaved,summary=4]"])
@pytest.mark.parametrize("mode", MODES)
def test_the_composed_event_sequence_is_the_full_runs(label, mode):
    """What the GPU memory and time models read: every allocation and free in order with
    its size and op, every op's FLOPs and its arguments' description; and for plain and
    checkpoint every op. (The reversible backward ends with one detach per parameter,
    in the autograd engine's heap order, as it stores the gradients: those zero-cost ops
    are the one thing composed from the traced depth, not counted per layer.)"""
    period = parse_variant(label).layer_period()
    layers = 7 * period
    full = trace_point(Point(label, mode, "model", shape(layers)))
    comp = Composition.of(trace_point(Point(label, mode, "model", shape(TRACED_PERIODS * period)), marks=True))
    events, flops = comp.events(layers // period)
    want = [(e, full.flops.get(i, 0)) for i, e in enumerate(full.trace)]
    got = [(e, flops.get(i, 0)) for i, e in enumerate(events)]

    def costs(seq):
        return [(e, f) for e, f in seq if e[0] in ("alloc", "free") or f or (e[0] == "op" and e[2] is not None)]

    assert costs(got) == costs(want)
    if mode != "reversible":
        assert got == want


# --- mutations: a composition that is wrong must be caught ------------------------------------
POINT = Point("lsh[bucket_size=32]", "plain", "model", shape(7))


def test_mutation_one_layer_dropped_is_caught(monkeypatch):
    original = Composition.instances

    def one_period_short(self, k):  # the traced depth itself stays right, so the self-check passes
        return original(self, k - 1) if k > self.periods else original(self, k)

    monkeypatch.setattr(Composition, "instances", one_period_short)
    fast = predict(POINT)
    assert fast.method.startswith("composed")
    with pytest.raises(AssertionError, match="fast .* != full-depth"):
        assert_same(fast, full_depth(POINT), POINT)


def test_mutation_off_by_one_composition_is_caught(monkeypatch):
    original = Composition.figures
    monkeypatch.setattr(Composition, "figures", lambda self, k: original(self, k + 1 if k > self.periods else k))
    fast = predict(POINT)
    with pytest.raises(AssertionError, match="fast .* != full-depth"):
        assert_same(fast, full_depth(POINT), POINT)


def test_mutation_a_middle_period_standing_in_for_the_first_is_caught(monkeypatch):
    """Repeat the first period's runs where the middle's belong: the event sequence shows it."""
    monkeypatch.setattr(Composition, "tau", lambda self, c, k: c if c in (-1, 0) else
                        self.periods - 1 if c == k - 1 else 0)
    with pytest.raises((AssertionError, NotComposable, KeyError)):
        test_the_composed_event_sequence_is_the_full_runs("sdpa", "plain")


def test_a_composer_broken_at_the_traced_depth_is_refused_at_run_time(monkeypatch):
    """The self-check: composing the traced depth must give the tracker's own figures;
    when it does not, the prediction runs every layer, and is still exact."""
    original = Composition.summarise

    def lose_a_byte(self, run):
        s = original(self, run)
        s.net -= 1
        return s

    monkeypatch.setattr(Composition, "summarise", lose_a_byte)
    fast = check(POINT)
    assert fast.method.startswith("exact; not composed") and "does not reproduce" in fast.method


# --- refusals -----------------------------------------------------------------------------
def test_what_cannot_be_shown_composable_runs_every_layer(monkeypatch):
    """A workload that, after the last block, works on every layer's parameters (here: one
    norm each): its forward grows with depth outside the per-block code. The trace shows
    it (ops that allocate read storages of every period) and the prediction runs all
    layers, still exact."""
    from attnprof.profiler.measure.workload import Workload

    original = Workload.forward

    def forward_then_every_parameters_norm(self):
        out = original(self)
        norms = [p.norm() for p in self.params]  # one scalar per parameter: grows with L
        del norms
        return out

    monkeypatch.setattr(Workload, "forward", forward_then_every_parameters_norm)
    fast = check(Point("sdpa", "plain", "model", shape(7)))
    assert fast.method.startswith("exact; not composed from L=3") and "beyond its neighbours" in fast.method


def test_talking_heads_in_a_reversible_stack_composes():
    """Its mixing matrices' gradients come out of bmm laid out unlike the parameters; the
    reversible backward lays them out as the parameter layer by layer (reversible._grad),
    not all at once at the end of backward, where the tail would grow with depth."""
    for batch in (1, 2):
        fast = check(Point("talking_heads", "reversible", "model", Shape(batch=batch, seq_len=256, d_model=32,
                                                                         heads=4, layers=7)))
        assert fast.method.startswith("composed")


def test_runs_out_of_order_are_refused(monkeypatch):
    original = drive.Marks.mark

    def shuffled(self, pass_, k):  # the forward marks its periods in the wrong order
        original(self, pass_, (k + 1) % self.periods if pass_ == "fwd" and k >= 0 else k)

    monkeypatch.setattr(drive.Marks, "mark", shuffled)
    traced = trace_point(Point("sdpa", "plain", "model", shape(TRACED_PERIODS)), marks=True)
    with pytest.raises(NotComposable):
        Composition.of(traced)


def test_only_the_traced_depth_composes():
    traced = trace_point(Point("sdpa", "plain", "model", shape(TRACED_PERIODS + 1)), marks=True)
    with pytest.raises(NotComposable):
        Composition.of(traced)
    comp = Composition.of(trace_point(Point("sdpa", "plain", "model", shape(TRACED_PERIODS)), marks=True))
    with pytest.raises(ValueError):
        comp.figures(TRACED_PERIODS - 1)


def test_a_stack_without_blocks_is_not_marked():
    traced = trace_point(Point("sdpa", "none", "attention", shape(1)), marks=True)
    assert traced.periods == 0
    with pytest.raises(NotComposable):
        Composition.of(traced)
