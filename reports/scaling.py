"""Fitted log-log slopes of memory and time in sequence length, beside the exponents
each variant's algorithm predicts at the same lengths (built-in variants only, see
``reports.builtins``).

The expected exponent of a variant with cost formulas (``cost_bytes`` and ``cost_flops``
class methods: LSH, the sparse patterns) is the same least-squares log-log slope, fitted
to the formula evaluated at the series' own lengths, options and shape, times its batch
(a tokens-per-batch scenario shrinks the batch as n grows). LSH's time is the clearest
case: attention in chunks is linear in n, hashing is n^2 * dh * r / c, so the honest
exponent is 1.26 between 16K and 64K, not a constant 1. A variant without formulas has
one cost term: its class's asymptotic ``complexity`` (plus the batch's slope) stands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from attnprof.profiler.records import DTYPE_BYTES
from attnprof.reports.builtins import builtin_spec
from attnprof.reports.data import panels, series_order


@dataclass
class Slope:
    series: str
    panel: str
    variant: str
    memory: Optional[float]  # fitted d log(bytes) / d log(n)
    memory_measured: bool  # fitted on measured peaks (else on predicted ones)
    time: Optional[float]  # fitted d log(ms) / d log(n), fwd+bwd
    points: int  # ok points with a length of their own
    expected: Optional[tuple]  # (memory, time) exponents at scope attention; None if unknown


def fit_slope(lengths, values) -> Optional[float]:
    """Least-squares slope of log(value) on log(length); None below two distinct lengths."""
    pairs = [(n, v) for n, v in zip(lengths, values)
             if n is not None and n > 0 and v is not None and not math.isnan(v) and v > 0]
    if len({n for n, _ in pairs}) < 2:
        return None
    x = np.log([n for n, _ in pairs])
    y = np.log([v for _, v in pairs])
    return float(np.polyfit(x, y, 1)[0])


def expected_exponents(label, lengths: Optional[Sequence[int]] = None, *, heads: int = 4, head_dim: int = 64,
                       batches: Optional[Sequence[int]] = None, dtype: str = "float32") -> Optional[tuple]:
    """(memory, time) exponents a built-in variant predicts at scope attention; None for
    any other label (a plug-in, ``module:Class``, an unknown name: never imported).

    Given two or more distinct ``lengths`` (with their ``batches``, default 1 each), each
    exponent the variant has a formula for is the log-log slope of formula x batch over
    them, fitted as the measured slope is; the rest is the class's ``complexity`` plus the
    slope of the batch. Without lengths: ``complexity`` (the asymptotic orders)."""
    spec = builtin_spec(label)
    if spec is None:
        return None
    cls = spec.cls
    constant = tuple(float(e) for e in cls.complexity)
    ns = [int(n) for n in (lengths or ()) if n is not None and int(n) > 0]
    if len(set(ns)) < 2:
        return constant
    bs = [int(b) for b in batches] if batches is not None else [1] * len(ns)
    if len(bs) != len(ns) or min(bs) <= 0:
        bs = [1] * len(ns)
    batch_slope = fit_slope(ns, bs) or 0.0
    options = cls.resolve_options(spec.options)
    size = DTYPE_BYTES.get(str(dtype), 4)
    formulas = (lambda n: cls.cost_bytes(options, n, heads, head_dim, dtype_bytes=size) if hasattr(cls, "cost_bytes")
                else None,
                lambda n: cls.cost_flops(options, n, heads, head_dim) if hasattr(cls, "cost_flops") else None)
    out = []
    for formula, asymptotic in zip(formulas, constant):
        try:
            values = [formula(n) for n in ns]
        except (ArithmeticError, ValueError, KeyError, TypeError):  # a shape the formula cannot take
            values = [None]
        if any(v is None for v in values):
            out.append(asymptotic + batch_slope)
        else:
            fitted = fit_slope(ns, [v * b for v, b in zip(values, bs)])
            out.append(asymptotic + batch_slope if fitted is None else fitted)
    return tuple(out)


def slopes(frame: pd.DataFrame) -> list[Slope]:
    out = []
    ok = frame[frame["status"] == "ok"]
    for panel in panels(frame):
        for series in series_order(frame):
            rows = ok[(ok["panel"] == panel) & (ok["series"] == series)].sort_values("seq_len")
            every = frame[(frame["panel"] == panel) & (frame["series"] == series)].sort_values("seq_len")
            if every.empty:
                continue
            measured = rows["measured_peak_bytes"].notna().sum() >= 2
            column = "measured_peak_bytes" if measured else "predicted_peak_bytes"
            variant = str(every["variant"].iloc[0])
            out.append(Slope(series, panel, variant,
                             fit_slope(rows["seq_len"], rows[column]), bool(measured),
                             fit_slope(rows["seq_len"], rows["time_ms"]),
                             int(rows["seq_len"].nunique()), _expected(variant, rows, every)))
    return out


def _expected(variant: str, rows: pd.DataFrame, every: pd.DataFrame) -> Optional[tuple]:
    """The expected exponents at the lengths the fitted slopes used (the ok points), or at
    all of the series' lengths when fewer than two are ok."""
    at = rows if rows["seq_len"].nunique() >= 2 else every
    first = every.iloc[0]
    try:
        heads = int(first.get("heads", 4))
        head_dim = int(first.get("d_model", 256)) // heads
    except (TypeError, ValueError, ZeroDivisionError):
        heads, head_dim = 4, 64
    batches = list(at["batch"]) if "batch" in at else None
    return expected_exponents(variant, list(at["seq_len"]), heads=heads, head_dim=max(head_dim, 1),
                              batches=batches, dtype=str(first.get("dtype", "float32")))
