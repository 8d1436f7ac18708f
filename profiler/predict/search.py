"""THE budget search: the longest length that fits, as one bisection over a bracket.

``bracket(lo, hi, between, fits)`` keeps ``lo`` fitting (or the sentinel below every
candidate) and ``hi`` not fitting (or the sentinel above), asks ``between(lo, hi)`` for
the next candidate strictly inside (None: decided) and ``fits(candidate)`` whether it
fits. How a point is evaluated is the caller's: the CPU's fake-tensor peak, the GPU
memory model's total, under a budget or a GPU's memory. ``fits`` is a generator
(``yield from``), so that a search can be a chain of the worker pool (pool.run_chains)
yielding each point to predict; ``longest_index`` runs the same search in this process
over plain functions. ``halves`` is the plain bisection's ``between``: the middle index.
"""

from __future__ import annotations

from typing import Callable, Generator, Optional

Between = Callable[[int, int], Optional[int]]


def bracket(lo: int, hi: int, between: Between, fits: Callable[[int], Generator]) -> Generator:
    """``lo, hi = yield from bracket(...)``: the final bracket (lo fits, hi does not)."""
    while (mid := between(lo, hi)) is not None:
        if (yield from fits(mid)):
            lo = mid
        else:
            hi = mid
    return lo, hi


def halves(lo: int, hi: int) -> Optional[int]:
    """The middle of an index bracket, None once lo and hi are neighbours."""
    return (lo + hi) // 2 if hi - lo > 1 else None


def longest_index(count: int, fits: Callable[[int], bool], between: Between = halves) -> tuple[int, int]:
    """Over indices 0..count-1 (fitting ones first): (the last that fits or -1, the first
    that does not or ``count``), ``fits(i)`` called in this process."""
    return finish(bracket(-1, count, between, lambda i: _now(fits(i))))


def finish(search: Generator):
    """The answer of a search whose ``fits`` never yields (it evaluates in this process)."""
    try:
        step = next(search)
    except StopIteration as done:
        return done.value
    raise RuntimeError(f"the search yielded {step!r}: its fits() must not yield here")


def _now(value):
    """A generator that yields nothing and returns ``value`` (``yield from`` gives it back)."""
    return value
    yield  # noqa: unreachable - makes this a generator
