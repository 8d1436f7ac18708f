"""One point's prediction: peak bytes, breakdown and FLOPs from fake tensors on the CPU,
equal to the byte to the plain full-depth fake run (``measure.accounting.account(point,
fake=True)``): read from the one prediction cache (cache.py), else a small point run for
real, a deep stack traced three periods deep and composed (compose.py), or every layer
traced (measure/drive.py's ``trace_point``)."""

from __future__ import annotations

import time
from dataclasses import replace

from attnprof.profiler.measure.accounting import Accounting, account
from attnprof.profiler.measure.drive import TooBig, trace_point
from attnprof.profiler.predict import cache as prediction_cache
from attnprof.profiler.predict import trust_memo
from attnprof.profiler.predict.compose import TRACED_PERIODS, Composition, NotComposable
from attnprof.profiler.records import Point
from attnprof.scenarios.variants.registry import spec_of, with_spec


def predict(point: Point, *, count_flops: bool = True, exact: bool = False) -> Accounting:
    """Predicted peak bytes and FLOPs of a point, from fake tensors on the CPU device,
    equal to the byte to the plain full-depth fake run (``account(point, fake=True)``).

    Not the meta device: SDPA falls back to its quadratic math path there (NOTES.md).

    Deep stacks: a fake run costs time per op, not per byte, so L layers cost L layers of
    dispatch. A stack deeper than three layer periods (p, the variant's ``layer_period``)
    is traced three periods deep and its L-layer event sequence composed from the trace
    (profiler/predict/compose.py): exact, and refused (all L layers run instead) wherever
    the trace cannot show that it is. Every run uses one dispatch mode for memory and
    FLOPs, and a FakeTensorMode that does not import torch._dynamo (fakemode.py). The
    figures are kept in the persistent cache (cache.py) and read back from it.
    ``exact=True`` runs ``account`` itself, uncached: every layer, the tracker and
    FlopCounter as separate modes; the tests check that both agree.
    """
    if exact:
        return account(point, fake=True, device="cpu", count_flops=count_flops)
    start = time.perf_counter()
    trust_memo.install()  # a passed internals check is recalled, not rerun, in later processes
    point = with_spec(point)  # a point built by hand: its label parsed once, here
    hit = prediction_cache.load(point)
    if hit is not None:
        acc = Accounting(**hit, cached=True)
    else:
        acc = _predict(point)
        prediction_cache.store(point, {name: getattr(acc, name) for name in prediction_cache.FIELDS})
    if not count_flops:
        acc.flops_fwd = acc.flops_bwd = 0
    acc.wall_ms = (time.perf_counter() - start) * 1e3
    return acc


# A point this small is predicted by running it on real CPU tensors: the same tracker and
# the same figures (tested), in milliseconds, without importing the fake-tensor machinery
# (sympy and torch's meta kernels: ~0.8 s). SMALL_POINT_BYTES bounds what its tensors could
# need before it runs (small_point); the tracker stops it at REAL_LIMIT_BYTES anyway.
SMALL_POINT_BYTES = 64 << 20
REAL_LIMIT_BYTES = 256 << 20
# Variants (their modules) whose autocast points take the fake path even when small (small_point).
_AUTOCAST_FAKE_ONLY = frozenset({"attnprof.scenarios.variants.lsh"})


def small_point(point: Point) -> bool:
    """Whether ``point`` is predicted by a real run: a built-in variant in float32 whose
    attention scores, counted generously, fit in SMALL_POINT_BYTES. The bound takes every
    score matrix as n x n per head, layer and sequence, in 8-byte elements, times the
    largest integer option (hash rounds, bucket or block sizes) and the feed-forward's
    n x d_ff activations: far above what any built-in variant allocates.

    float32 only: there the real CPU kernels and torch's fake ones agree on every output
    layout, so the two runs record the same ops (tested). In bfloat16 they do not
    everywhere (measured: an LSH backward where a real tensor is viewed, a fake one copied
    first), so bfloat16 points take the fake path, which is the reference. Autocast points
    (``Shape.autocast``, issue 24: float32 parameters, bfloat16 or float16 kernels) run for
    real except LSH's, the variant whose low-precision layouts were seen to differ: for the
    others the real run equals the fake one in every mode, with and without the optimizer
    step (tests/profiler/measure/test_small_points_amp.py), so a tiny AMP point need not pay
    for the fake-tensor imports (scripts/bench_predict.py's tiny point)."""
    spec = spec_of(point)
    cls = spec.cls
    if not cls.__module__.startswith("attnprof.scenarios.variants."):
        return False  # a plug-in: its memory is not known before it runs
    s = point.shape
    if s.dtype != "float32" or (s.autocast and cls.__module__ in _AUTOCAST_FAKE_ONLY):  # issue 24: see above
        return False
    if s.autocast == "float16" and point.kernels == "cuda":  # issue 39: CUDA's half-to-float softmax, which
        return False  # the CPU's kernel refuses (measure/cuda_autocast.py): fake tensors only
    options = cls.resolve_options(spec.options)
    factor = max([1] + [v for v in options.values() if isinstance(v, int) and not isinstance(v, bool)])
    hidden = s.d_ff * (2 if s.mlp == "swiglu" else 1)  # issue 24: swiglu's two hidden tensors
    elements = s.batch * s.layers * (s.heads * s.seq_len ** 2 * factor + 8 * s.seq_len * hidden)
    elements += 8 * s.batch * s.seq_len * s.vocab + 4 * s.vocab * s.d_model  # issue 24: logits, their gradients; embedding
    return elements * 8 <= SMALL_POINT_BYTES


def warm_fake_tensors(forward_only: bool = False) -> None:
    """Import what a fake-tensor prediction imports on its first ops (sympy, torch's fake
    and meta kernels, DTensor's op table: ~0.5 s), by tracing a tiny bfloat16 point (a
    small float32 point runs on real tensors and imports none of it); nothing is cached.
    For a process that forks workers which then predict (runner/preload.py)."""
    from attnprof.profiler.records import Shape

    trace_point(Point("full", "plain", "model", Shape(batch=1, seq_len=16, d_model=16, heads=2, layers=1,
                                                        dtype="bfloat16"), forward_only=forward_only))


def _predict(point: Point) -> Accounting:
    """The fast path: a small point run for real; three periods traced and composed; or
    every layer traced."""
    if small_point(point):
        try:
            traced = trace_point(point, real_limit_bytes=REAL_LIMIT_BYTES)
        except TooBig:
            pass
        else:
            return _accounting(traced, "exact (a small point: run on real CPU tensors)")
    layers = point.shape.layers
    period = _layer_period(point)
    note = ""
    if point.scope == "model" and layers % period == 0 and layers // period > TRACED_PERIODS:
        traced_layers = TRACED_PERIODS * period
        traced = trace_point(_with_layers(point, traced_layers), marks=True)
        try:
            composition = Composition.of(traced)
            peak, breakdown, largest, fwd, bwd = composition.figures(layers // period)
            peak_op, peak_pass = composition.peak_op(layers // period)
        except NotComposable as exc:
            note = f"; not composed from L={traced_layers}: {exc}"
        else:
            return Accounting(peak, breakdown, largest, fwd, bwd, method=f"composed from L={traced_layers}",
                              op_costs=composition.op_costs(layers // period), peak_op=peak_op, peak_pass=peak_pass)
    return _accounting(trace_point(point), "exact" + note)


def _accounting(traced, method: str) -> Accounting:
    return Accounting(traced.peak_bytes, traced.breakdown_bytes, traced.largest_at_peak, traced.flops_fwd,
                      traced.flops_bwd, method=method, op_costs=traced.op_costs(), peak_op=traced.peak_op,
                      peak_pass=traced.peak_pass)


def _layer_period(point: Point) -> int:
    return spec_of(point).layer_period()


def _with_layers(point: Point, layers: int) -> Point:
    return replace(point, shape=replace(point.shape, layers=layers))
