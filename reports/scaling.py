"""Fitted log-log slopes of memory and time in sequence length, beside the exponents
each variant's algorithm predicts (``Attention.complexity``; built-in variants only, see
``reports.builtins``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from attnprof.reports.builtins import expected_exponents
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
    pairs = [(n, v) for n, v in zip(lengths, values) if v is not None and not math.isnan(v) and v > 0]
    if len({n for n, _ in pairs}) < 2:
        return None
    x = np.log([n for n, _ in pairs])
    y = np.log([v for _, v in pairs])
    return float(np.polyfit(x, y, 1)[0])


def slopes(frame: pd.DataFrame) -> list[Slope]:
    out = []
    ok = frame[frame["status"] == "ok"]
    for panel in panels(frame):
        for series in series_order(frame):
            rows = ok[(ok["panel"] == panel) & (ok["series"] == series)].sort_values("seq_len")
            every = frame[(frame["panel"] == panel) & (frame["series"] == series)]
            if every.empty:
                continue
            measured = rows["measured_peak_bytes"].notna().sum() >= 2
            column = "measured_peak_bytes" if measured else "predicted_peak_bytes"
            variant = str(every["variant"].iloc[0])
            out.append(Slope(series, panel, variant,
                             fit_slope(rows["seq_len"], rows[column]), bool(measured),
                             fit_slope(rows["seq_len"], rows["time_ms"]),
                             int(rows["seq_len"].nunique()), expected_exponents(variant)))
    return out
