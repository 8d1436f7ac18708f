"""A pass's epilogue (issue 24, predict/compose_epilogue.py), on hand-made runs: what it
frees of the middle period it frees of every middle period, in order, block by block;
one that does not free the same place of the first and last period is refused; the bytes
it frees come by category."""

from __future__ import annotations

from attnprof.profiler.predict.compose_epilogue import Epilogue, at_depth, freed_by_category, problem


class Run:
    def __init__(self, allocs):
        self.allocs = allocs

    def signature(self, i):
        return self.allocs[i]


COPY = (8, "autocast_copies", ("_to_copy.default", (2,), "bfloat16"))
ACT = (64, "activations", ("mm.default", (4, 4), "float32"))
RUNS = {("fwd", t): Run([ACT, COPY]) for t in (0, 1, 2)}


def test_a_free_of_every_period_composes():
    frees = frozenset({("fwd", t, 1) for t in (0, 1, 2)})
    assert problem(frees, RUNS, 3) == ""


def test_a_free_of_the_middle_alone_is_refused():
    assert "every period" in problem(frozenset({("fwd", 1, 1)}), RUNS, 3)
    assert "every period" in problem(frozenset({("fwd", 1, 1), ("fwd", 0, 1), ("fwd", 2, 0)}), RUNS, 3)


def test_a_free_of_no_such_storage_is_refused():
    assert "no such storage" in problem(frozenset({("fwd", 2, 7)}), RUNS, 3)


def test_at_depth_repeats_each_block_of_middle_frees_per_middle_period():
    e = Epilogue(("fwd", 2), [("F", ("fwd", 0, 1)), ("F", ("fwd", 1, 1)), ("F", ("fwd", 1, 0)), ("O", "mark"),
                              ("F", ("fwd", 2, 1))])
    assert at_depth(e, 5, 3) == [("F", ("fwd", 0, 1)),
                                 ("F", ("fwd", 1, 1)), ("F", ("fwd", 1, 0)), ("F", ("fwd", 2, 1)), ("F", ("fwd", 2, 0)),
                                 ("F", ("fwd", 3, 1)), ("F", ("fwd", 3, 0)),
                                 ("O", "mark"), ("F", ("fwd", 4, 1))]
    assert at_depth(e, 3, 3) == e.events  # the traced depth: as traced


def test_freed_bytes_by_category():
    events = [("F", ("fwd", c, 1)) for c in range(4)] + [("F", ("fwd", 0, 0)), ("O", "mark")]
    assert freed_by_category(events, lambda q, c: RUNS[(q, min(c, 2))].allocs) == {"autocast_copies": -32,
                                                                                    "activations": -64}
