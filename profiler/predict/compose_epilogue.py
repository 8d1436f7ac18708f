"""A pass's epilogue in the depth composition (issue 24): what happens once after a pass's
last period and frees storages of every period at once.

Two things do: the end of the forward's autocast region (torch.autocast clears its weight
cache, the low-precision casts of every layer's parameters that nothing saved) and the
optimizer's ``zero_grad(set_to_none=True)`` (every parameter's gradient). The trace marks
where each starts (measure/drive.EPILOGUE). An epilogue may only free storages and run
profiler marks that cost nothing (``record_function``); composed to K periods, what it frees
of the traced middle period it frees of every middle period, provided it frees the same
place of the first and the last period too, where the storage looks the same: a loop over
every period, not a neighbour's storage freed late (``problem``). compose.py reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIDDLE = 1  # the traced period that repeats (compose.py)


@dataclass
class Epilogue:
    after: tuple  # the traced run it follows: (pass, last period)
    events: list = field(default_factory=list)  # ("F", (pass, traced period, alloc index)) | ("O", op), in order

    @property
    def frees(self) -> frozenset:
        return frozenset(e[1] for e in self.events if e[0] == "F")


def problem(frees: frozenset, runs: dict, periods: int) -> str:
    """Why these frees (of a traced stack of ``periods`` periods, ``runs`` compose.py's) do
    not compose as a loop over every period, or ''."""
    last = periods - 1
    for q, t, i in sorted(frees, key=repr):
        if (q, t) not in runs or i >= len(runs[(q, t)].allocs):
            return f"the epilogue frees {(q, t, i)}: no such storage"
        if t == MIDDLE and any((q, e, i) not in frees or i >= len(runs[(q, e)].allocs)
                               or runs[(q, e)].signature(i) != runs[(q, t)].signature(i) for e in (0, last)):
            return f"the epilogue frees {(q, t, i)} but not the same of every period"
    return ""


def at_depth(epilogue: Epilogue, k: int, periods: int) -> list:
    """The epilogue of a k-period stack, its events as traced with periods composed: a run of
    consecutive frees of the middle's storages once per middle period (1..k-2, in order, as
    a loop over the parameters frees them), the last period's as period k-1's."""
    out, block = [], []
    for event in epilogue.events + [None]:
        if event is not None and event[0] == "F" and event[1][1] == MIDDLE:
            block.append(event[1])
            continue
        out += [("F", (q, c, i)) for c in range(1, k - 1) for q, _, i in block]
        block = []
        if event is not None and event[0] == "F":
            q, t, i = event[1]
            out.append(("F", (q, k - 1 if t == periods - 1 else t, i)))
        elif event is not None:
            out.append(event)
    return out


def freed_by_category(events: list, allocs_of) -> dict:
    """category -> minus the bytes these composed events free; ``allocs_of(pass, period)``:
    that composed run's allocations (its template's)."""
    by: dict = {}
    for event in events:
        if event[0] == "F":
            q, c, i = event[1]
            nbytes, category, _ = allocs_of(q, c)[i]
            by[category] = by.get(category, 0) - nbytes
    return by
