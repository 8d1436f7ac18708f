"""The one budget search (profiler/predict/search.py): exact boundaries on synthetic
monotone peak functions, in this process and as a yielding chain."""

from __future__ import annotations

import pytest

from attnprof.profiler.predict.search import bracket, finish, halves, longest_index


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 16, 21])
def test_it_finds_the_exact_boundary_of_a_monotone_predicate(count):
    for boundary in range(-1, count):
        asked = []

        def fits(i, boundary=boundary):
            asked.append(i)
            return i <= boundary

        assert longest_index(count, fits) == (boundary, boundary + 1)
        assert len(asked) == len(set(asked))  # each index once
        assert len(asked) <= max(1, count).bit_length()  # a bisection's count


def test_a_peak_function_and_a_budget():
    lengths = [16 << i for i in range(17)]

    def peak(n):  # quadratic plus a constant: the shape of an attention's peak
        return 3 * n * n + 1000

    for budget in (0, 999, 1000 + 3 * 16 * 16, 10 ** 9, 10 ** 13):
        lo, hi = longest_index(len(lengths), lambda i: peak(lengths[i]) <= budget)
        fitting = [n for n in lengths if peak(n) <= budget]
        assert (lengths[lo] if lo >= 0 else None) == (fitting[-1] if fitting else None)
        assert hi == len(fitting)


def test_the_same_search_as_a_chain_yields_each_point_and_gets_the_same_answer():
    """The CPU search yields each length to the pool (``yield from``); the GPU search calls
    its model in this process: both run ``bracket``, and agree."""
    lengths = [16 << i for i in range(12)]
    budget = 5000

    def evaluate(n):
        return n * 7

    def fits(i):  # as a chain step: the pool sends the figure back
        value = yield lengths[i]
        return value <= budget

    chain = bracket(-1, len(lengths), halves, fits)
    asked, value = [], None
    try:
        n = next(chain)
        while True:
            asked.append(n)
            n = chain.send(evaluate(n))
    except StopIteration as done:
        answer = done.value
    assert answer == longest_index(len(lengths), lambda i: evaluate(lengths[i]) <= budget)
    assert asked and all(n in lengths for n in asked)


def test_a_custom_between_searches_values_not_indices():
    """The finer search bisects over multiples of a step between two lengths."""
    step = 48

    def between(lo, hi):
        mid = (lo + hi) // 2 // step * step
        return mid if lo < mid < hi else (mid + step if lo < mid + step < hi else None)

    for boundary in (0, 48, 480, 1000, 2000):
        lo, hi = finish(bracket(0, 2048, between, lambda n: iter(()) if False else _gen(n <= boundary)))
        assert lo == boundary // step * step or (lo == 0 and boundary < step)
        assert hi - lo <= step or hi == 2048


def _gen(value):
    return value
    yield


def test_finish_refuses_a_search_that_yields():
    def fits(i):
        yield i
        return True

    with pytest.raises(RuntimeError):
        finish(bracket(-1, 4, halves, fits))
