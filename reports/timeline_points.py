"""Which points the report's memory-over-a-step chart draws, and whether each is cheap
enough: the points the user names (``report --timeline-point LABEL``) and the longest ok
point of each built-in variant.

Why its own module and budget: the chart re-runs each point under fake tensors, so it used
to get only what the capacity phase left of the render's time and could silently not
appear. Its points are few (one per variant, plus the named ones), so it gets a bounded
budget of its own (``TIMELINE_SECONDS``), each point's trace cost is predicted before it
runs, and a point that would not fit is skipped with its reason on the page.

A label is what the report shows: the gate's point label (``sdpa plain n=1024``, the
chart's panel titles) or the series label of the tables and charts plus the panel and the
length (``full (d_model=64) plain n=256``). Whitespace runs count as one space.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import pandas as pd

from attnprof.profiler.gate.snapshot import point_label
from attnprof.profiler.records import IDENTITY_FIELDS
from attnprof.profiler.units import printable
from attnprof.reports.builtins import is_builtin
from attnprof.reports.capacity import point_maker
from attnprof.reports.data import ReportError, one_line

TIMELINE_SECONDS = 5.0  # the automatic points' own budget (named points are always drawn)
# Trace cost prior: fake tensors cost per op, not per byte, so a point's events grow with its
# layers (measured here: ~0.03-0.15 s per 2-layer CPU point at n=256-4096); long sequences
# add a little (index tensors some variants build), counted per TOKENS_FREE tokens.
SECONDS_PER_LAYER = 0.1
TOKENS_FREE = 1 << 16
SHOWN_LABELS = 5  # valid labels an unknown-label error lists, the closest to the typed one first


class TimelinePointError(ReportError):
    """A ``--timeline-point`` label that names no point of the run; one line, exit 2."""


@dataclass(frozen=True)
class Candidate:
    label: str  # what the page and the chart's panel call it (printable)
    point: object  # profiler.records.Point
    why: str  # "named" | "longest ok point of VARIANT"


def _norm(text) -> str:
    return " ".join(printable(text).split())


def _series_label(row: dict) -> str:
    return _norm(f"{row['series']} {row['panel']} n={row['seq_len']}")


def labelled_rows(frame: pd.DataFrame) -> dict:
    """label -> {point key: row index} over the built-in variants' points (any status: a
    prediction also shows why a point ran out of memory), both label forms."""
    out: dict = {}
    if frame.empty:
        return out
    for index, row in frame.iterrows():
        if not is_builtin(row["variant"]):
            continue
        record = row.to_dict()
        key = tuple(str(record.get(f)) for f in IDENTITY_FIELDS)
        for label in (_norm(point_label(record)), _series_label(record)):
            out.setdefault(label, {}).setdefault(key, index)
    return out


def shown_label(frame: pd.DataFrame, index, labels: dict) -> str:
    """The gate's label of row ``index`` where it names only that point, else its series form."""
    row = frame.loc[index].to_dict()
    gate = _norm(point_label(row))
    return gate if len(labels.get(gate, {})) == 1 else _series_label(row)


def _point(frame: pd.DataFrame, index):
    rows = frame.loc[[index]]
    return point_maker(rows)(int(rows.iloc[0]["seq_len"]))


def named(frame: pd.DataFrame, names) -> list:
    """The Candidates the user named, in their order (a repeat drawn once); an unknown or
    ambiguous label is a TimelinePointError naming a few valid ones, before any work."""
    labels = labelled_rows(frame)
    out, seen = [], set()
    for name in names:
        found = labels.get(_norm(name))
        if not found:
            valid = sorted({shown_label(frame, i, labels) for keys in labels.values() for i in keys.values()})
            nearest = difflib.get_close_matches(_norm(name), valid, n=SHOWN_LABELS, cutoff=0)  # closest first
            listed = ", ".join(f"'{v}'" for v in nearest)
            more = f" and {len(valid) - SHOWN_LABELS} more" if len(valid) > SHOWN_LABELS else ""
            hint = f"valid labels include {listed}{more}" if valid else "the run has no point of a built-in variant"
            raise TimelinePointError(one_line(f"--timeline-point '{_norm(name)[:120]}' names no point of this run; "
                                              f"{hint} (as the chart titles and the gate print them)"))
        if len(found) > 1:
            options = ", ".join(f"'{_series_label(frame.loc[i].to_dict())}'" for i in list(found.values())[:3])
            raise TimelinePointError(one_line(f"--timeline-point '{_norm(name)[:120]}' names {len(found)} points; "
                                              f"give the series form, e.g. {options}"))
        index = next(iter(found.values()))
        if index not in seen:
            seen.add(index)
            out.append(Candidate(shown_label(frame, index, labels), _point(frame, index), "named"))
    return out


def longest(frame: pd.DataFrame) -> list:
    """Candidates: the longest ok point of each built-in variant (plain mode first among
    equals), in the frame's order of variants."""
    if frame.empty or "status" not in frame:
        return []
    labels = labelled_rows(frame)
    ok = frame[frame["status"] == "ok"]
    out = []
    for variant in dict.fromkeys(ok["variant"].astype(str)):
        if not is_builtin(variant):
            continue
        rows = ok[ok["variant"].astype(str) == variant]
        rows = rows.assign(_plain=rows["mode"] != "plain").sort_values(["seq_len", "_plain"], ascending=[False, True])
        index = rows.index[0]
        out.append(Candidate(shown_label(frame, index, labels), _point(frame, index),
                             f"longest ok point of {printable(variant)}"))
    return out


def cost_units(point) -> float:
    """The predicted trace cost of ``point`` in layer-equivalents: its layers, more for
    sequences beyond TOKENS_FREE tokens (batch x length)."""
    shape = point.shape
    layers = 1 if point.scope == "attention" else max(1, int(shape.layers))
    return layers * max(1.0, shape.batch * shape.seq_len / TOKENS_FREE)


class Costs:
    """Seconds per cost unit: the prior until a point has been traced, then what was seen."""

    def __init__(self):
        self.spent_s, self.units = 0.0, 0.0
        self.auto_s = 0.0  # of spent_s, on the automatic points (their budget)

    def estimate_s(self, point) -> float:
        rate = self.spent_s / self.units if self.units else SECONDS_PER_LAYER
        return rate * cost_units(point)

    def saw(self, point, seconds: float) -> None:
        self.spent_s += seconds
        self.units += cost_units(point)
