"""The longest power-of-two length whose predicted peak fits a memory budget, per
series × mode: "which attention, at what length, on which GPU". The report's side: a
run's frame read into curves, the render caches in the run folder, the column labels;
the curves, their fits and the deadline-bounded search are profiler/predict/curve.py.

Predicted peaks come from the run's ``predicted_peak_bytes`` column and, beyond its
lengths, from ``attnprof.profiler.predict.fake_run.predict`` (fake tensors, no allocation),
called only at the lengths that decide a boundary and only within a time budget. Where
the budget runs out, the figure is a log-log extrapolation and is marked as such.
Predictions are cached in the run folder: a later render starts where this one stopped.
Only built-in variants are predicted (``reports.builtins``): a plug-in's label in a
results file is data, and its curve is drawn from the run's own records.

With named GPUs (``--gpu``) the columns are those GPUs instead of generic budgets, and
the figure that must fit is the GPU memory MODEL's ``gpu_total_bytes`` (CUDA context +
the simulated allocator's reserved peak, ``attnprof.profiler.memmodel.gpu_peak``) against the
GPU's own memory: predicted (GPU model), never measured. Its figures are cached beside
the others, in their own file, per (GPU, point).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from attnprof.errors import UserError
from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV
from attnprof.profiler.records import IDENTITY_DEFAULTS, Point, Shape
from attnprof.profiler.units import GIB, fmt_bytes, fmt_len
from attnprof.profiler.predict.curve import MAX_EXP, MIN_EXP, Curve, Fit, gpu_value, search_curves  # noqa: F401
from attnprof.reports import render_cache
from attnprof.reports.builtins import builtin_spec, expected_exponents, is_builtin
from attnprof.reports.render_cache import CACHE_FILE, GPU_CACHE_FILE, clean_fields

Warn = Callable[[str], None]

# Budgets in GiB, with GPUs that have about that much memory.
BUDGETS_GIB = {16: "V100 16GB, T4", 24: "RTX 4090, A10", 40: "A100 40GB", 80: "A100/H100 80GB", 141: "H200"}
GPU_MODEL = "predicted (GPU model)"  # how every GPU figure is labelled: a model, never a measurement
Predictor = Callable[[Point], int]
GpuPredictor = Callable[[Point, list], dict]  # (point, GPU specs) -> {GPU key: gpu_* fields}


def default_predictor(point: Point) -> int:
    if not is_builtin(point.variant):  # capacity() never asks; a second lock on the same door
        raise UserError(f"{point.variant!r} is not a built-in variant; reports predict built-ins only")
    from attnprof.profiler.predict.fake_run import predict  # torch machinery: import on first use

    return predict(point, count_flops=False).peak_bytes


def default_gpu_predictor(point: Point, gpus: list) -> dict:
    """The GPU memory model of a built-in point on each GPU: one fake-tensor trace, one
    allocator replay per GPU."""
    if not is_builtin(point.variant):
        raise UserError(f"{point.variant!r} is not a built-in variant; reports predict built-ins only")
    from attnprof.profiler.memmodel.gpu_peak import TraceCache  # torch machinery: import on first use
    from attnprof.profiler.predict.gpu_points import predict_gpu

    traces = TraceCache()
    return {g.key: predict_gpu(point, g, traces).fields() for g in gpus}


def fit_text(fit, ran: bool = True) -> str:
    """'16K'; '~16K' extrapolated; '1M+' at the search cap; '?' no prediction; '–' not in the run."""
    if not ran:
        return "–"
    if fit is None:
        return "?"
    if fit.length == 0:
        return f"<{fmt_len(1 << MIN_EXP)}"
    text = fmt_len(fit.length) + ("+" if fit.at_cap else "")
    return text if fit.verified else "~" + text


@dataclass
class Capacity:
    budgets: dict  # column -> what it stands for: budget in GiB -> GPUs with about that much
    #                memory; or, with named GPUs, GPU key -> the GPU's name
    fits: dict  # (series, panel) -> {column: Fit or None}
    calls: int  # predict() calls made for this report
    seconds: float
    problems: dict  # (series, panel) -> why its predictions stopped
    gpus: dict = field(default_factory=dict)  # GPU key -> GpuSpec: the columns are these GPUs (GPU model)
    model: dict = field(default_factory=dict)  # (series, panel, GPU key) -> {length: gpu_* fields}
    # (series, panel, GPU key) -> (length, how close the model came on a real GPU for that point
    # or why it was never checked: profiler/hardware/checked.how_sure), at the longest length that fits
    checked: dict = field(default_factory=dict)

    def label(self, column) -> str:
        """A column's heading: '24 GiB', or 'l4 (22.49 GiB)' for a named GPU."""
        if column in self.gpus:
            return f"{self.gpus[column].label} ({fmt_bytes(self.gpus[column].memory_bytes)})"
        return f"{column:g} GiB"


def capacity(frame: pd.DataFrame, run_dir: Path | None = None, *, seconds: float = 4.0,
             predictor: Predictor | None = None, budgets: dict | None = None, gpus: list | None = None,
             gpu_predictor: GpuPredictor | None = None, warn: Optional[Warn] = None) -> Capacity:
    """Fits for every series × panel and budget; predict() runs for about ``seconds`` at most
    (one call may overrun it), round-robin over curves, the shortest undecided length first.

    ``gpus`` (GpuSpecs): the columns are these GPUs rather than ``budgets``, and what must
    fit each is the GPU model's total (``gpu_predictor``, default the model itself).
    ``warn`` gets one line for a render cache with invalid entries (ignored, moved aside, written anew)."""
    if gpus:
        return _gpu_capacity(frame, run_dir, list(gpus), seconds, gpu_predictor or default_gpu_predictor, warn)
    predictor = predictor or default_predictor
    budgets = budgets or BUDGETS_GIB
    cache, bad = _read_cache(run_dir, warn)
    curves = [_curve(rows, cache) for _, rows in frame.groupby(["series", "panel"], sort=False)]
    # The first fake-tensor run in a process imports torch._dynamo (seconds): budget for it.
    warm = predictor is not default_predictor or "torch._dynamo" in sys.modules
    start = time.monotonic()
    calls = search_curves(curves, lambda c: [b * GIB for b in budgets], int(frame["seq_len"].min()), seconds, warm,
                    lambda c, n: _predict(c, n, predictor, cache))
    render_cache.write_cache(run_dir, cache, force=bad)
    fits = {(c.series, c.panel): {b: c.fit(b * GIB) for b in budgets} for c in curves}
    problems = {(c.series, c.panel): c.problem for c in curves if c.problem}
    return Capacity(dict(budgets), fits, calls, time.monotonic() - start, problems)


# --- named GPUs: the GPU memory model's total against each GPU's memory ------------------------
def _gpu_capacity(frame: pd.DataFrame, run_dir: Path | None, gpus: list, seconds: float,
                  predictor: GpuPredictor, warn: Optional[Warn]) -> Capacity:
    specs = {g.key: g for g in gpus}
    cache, bad = _read_gpu_cache(run_dir, warn)
    curves = [_gpu_curve(rows, spec, cache.get(gpu_fingerprint(spec), {}))
              for _, rows in frame.groupby(["series", "panel"], sort=False) for spec in specs.values()]
    warm = predictor is not default_gpu_predictor or "torch._dynamo" in sys.modules
    start = time.monotonic()
    calls = search_curves(curves, lambda c: [specs[c.gpu].memory_bytes], int(frame["seq_len"].min()), seconds, warm,
                    lambda c, n: _predict_gpu(c, n, predictor, cache, specs))
    render_cache.write(run_dir, GPU_CACHE_FILE, cache, force=bad)
    fits: dict = {}
    for c in curves:
        fits.setdefault((c.series, c.panel), {})[c.gpu] = c.fit(specs[c.gpu].memory_bytes)
    problems: dict = {}
    for c in curves:
        if c.problem:
            problems.setdefault((c.series, c.panel), c.problem)
    model = {(c.series, c.panel, c.gpu): dict(sorted(c.figures.items())) for c in curves}
    checked = {(c.series, c.panel, c.gpu): _checked(c, fits[(c.series, c.panel)][c.gpu], specs[c.gpu])
               for c in curves if not c.problem}
    return Capacity({k: g.name for k, g in specs.items()}, fits, calls, time.monotonic() - start, problems,
                    gpus=specs, model=model, checked=checked)


def _checked(curve: Curve, fit, spec) -> tuple:
    """(length, how_sure's line) for the curve's point at its longest fitting length (else
    the shortest searched): how close the model came on a real GPU for such a point."""
    from attnprof.profiler.hardware.checked import how_sure

    n = fit.length if fit is not None and fit.length else 1 << MIN_EXP
    try:
        return n, how_sure(curve.make_point(n).identity(), spec)
    except Exception:  # a row the point maker refuses: nothing is claimed for it
        return n, ""


def gpu_fingerprint(spec) -> str:
    """What the model's figures for a GPU depend on, beside the point: the GPU's key and
    the fields the model reads, the settings it honours (environment) and the versions of
    the code (the one prediction cache's ``versions_tag``: torch, attnprof, the digest of
    its source). A cached figure is used only under the same fingerprint."""
    from attnprof.profiler.predict.cache import versions_tag

    described = {"key": spec.key, "memory_bytes": spec.memory_bytes, "cc": list(spec.compute_capability),
                 "sm_count": spec.sm_count, "context_bytes": spec.context_bytes,
                 "env": {v: os.environ.get(v, "") for v in _MODEL_ENV}, "model": versions_tag()}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
    return f"{spec.key}:{digest}"


_MODEL_ENV = ("ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", *BLAS_ENV)  # what the GPU model reads


def _gpu_curve(rows: pd.DataFrame, spec, cached: dict) -> Curve:
    first = rows.iloc[0]
    make_point = point_maker(rows)
    curve = Curve(str(first["series"]), str(first["panel"]), make_point, _memory_exponent(str(first["variant"])),
                  gpu=spec.key, offset=float(spec.context_bytes))
    if not is_builtin(str(first["variant"])):
        curve.problem = not_predicted(str(first["variant"]))
    for e in range(MIN_EXP, MAX_EXP + 1):  # earlier renders' (or the sweep's) model figures
        try:
            fields = cached.get(make_point(1 << e).key_text())
        except Exception:
            fields = None
        if fields is not None:
            curve.figures[1 << e] = fields
            curve.known[1 << e] = gpu_value(fields, spec.memory_bytes)
    return curve


def _predict_gpu(curve: Curve, n: int, predictor: GpuPredictor, cache: dict, specs: dict) -> int:
    """The model at one length for the curve's GPU, and for every named GPU still without
    it (one trace serves them all); 1 if the predictor ran."""
    try:
        point = curve.make_point(n)
        key, spec = point.key_text(), specs[curve.gpu]
        ran = 0
        if key not in cache.get(gpu_fingerprint(spec), {}):
            missing = [g for g in specs.values() if key not in cache.get(gpu_fingerprint(g), {})]
            made = predictor(point, missing)
            for g in missing:
                fields = clean_fields(made.get(g.key))
                if fields is None:
                    raise ValueError(f"the GPU model gave no figures for {g.key}")
                cache.setdefault(gpu_fingerprint(g), {})[key] = fields
            ran = 1
        fields = cache[gpu_fingerprint(spec)][key]
        curve.figures[n] = fields
        curve.known[n] = gpu_value(fields, spec.memory_bytes)
        return ran
    except Exception as exc:  # an unknown plug-in, a shape a variant refuses, a fake-tensor gap
        curve.problem = " ".join(f"GPU model at n={n}: {type(exc).__name__}: {exc}".split())[:300]
    return 0


def _read_gpu_cache(run_dir: Path | None, warn: Optional[Warn]) -> tuple[dict, bool]:
    cache, problem = render_cache.read_gpu_cache(run_dir)
    if problem:  # moved aside whether or not anyone is told (render_cache.warning)
        line = render_cache.warning(run_dir, GPU_CACHE_FILE, problem)
        if warn:
            warn(line)
    return cache, bool(problem)


def _read_cache(run_dir: Path | None, warn: Optional[Warn]) -> tuple[dict, bool]:
    cache, problem = render_cache.read_cache(run_dir)
    if problem:  # moved aside whether or not anyone is told (render_cache.warning)
        line = render_cache.warning(run_dir, CACHE_FILE, problem)
        if warn:
            warn(line)
    return cache, bool(problem)


def add_gpu_predictions(run_dir: Path, gpus: list, entries: dict, warn: Optional[Warn] = None) -> None:
    """Merge model figures made elsewhere (the sweep's capacity phase:
    ``profiler.predict.gpu_points.gpu_capacity_predictions``, (GPU key, point key) -> gpu_* fields)."""
    cache, bad = _read_gpu_cache(run_dir, warn)
    fingerprints = {g.key: gpu_fingerprint(g) for g in gpus}
    for (gpu, key), fields in entries.items():
        fields = clean_fields(fields)
        if gpu in fingerprints and fields is not None:
            cache.setdefault(fingerprints[gpu], {})[key] = fields
    render_cache.write(run_dir, GPU_CACHE_FILE, cache, force=bad)


def _predict(curve: Curve, n: int, predictor: Predictor, cache: dict) -> int:
    """Predict one length into the curve (and the cache); 1 if predict() ran."""
    try:
        point = curve.make_point(n)
        key = point.key_text()
        if key not in cache:
            cache[key] = int(predictor(point))
            curve.known[n] = cache[key]
            return 1
        curve.known[n] = cache[key]
    except Exception as exc:  # an unknown plug-in, a shape a variant refuses, a fake-tensor gap
        curve.problem = " ".join(f"predicting n={n}: {type(exc).__name__}: {exc}".split())[:300]
    return 0


def not_predicted(variant: str) -> str:
    return (f"{variant!r} is not a built-in variant, so it is not predicted here (a report never imports "
            f"code a results file names); its figures come from the run's own records")


def later_fields(row) -> dict:
    """The series' later identity fields (records.later: the training-step options of issue
    24), each as its default's type; absent (an older run) or null: the default."""
    out = {}
    for name, default in IDENTITY_DEFAULTS.items():
        value = row.get(name, default) if hasattr(row, "get") else default
        out[name] = default if value is None or (not isinstance(value, str) and pd.isna(value)) else type(default)(value)
    return out


def point_maker(rows: pd.DataFrame) -> Callable[[int], Point]:
    """The series' point at any length: its shape, and its batch rule."""
    first = rows.iloc[0]
    batch_of = _batch_rule(rows)

    def shape_at(n: int) -> Shape:
        return Shape(batch=batch_of(n), seq_len=n, d_model=int(first["d_model"]), heads=int(first["heads"]),
                     layers=int(first["layers"]), dtype=str(first["dtype"]), ff_mult=int(first["ff_mult"]),
                     ff_chunks=int(first["ff_chunks"]), **later_fields(first))

    # the series' label parsed once (built-ins only: a report never imports code a label names)
    label = str(first["variant"])
    spec = builtin_spec(label)
    template = Point(label, str(first["mode"]), str(first["scope"]), shape_at(int(first["seq_len"])),
                     bool(first["forward_only"]), spec=spec if spec is not None and spec.label == label else None)

    def make_point(n: int) -> Point:
        return replace(template, shape=shape_at(n))  # the template's parsed variant carries over

    return make_point


def _curve(rows: pd.DataFrame, cache: dict) -> Curve:
    first = rows.iloc[0]
    make_point = point_maker(rows)
    curve = Curve(str(first["series"]), str(first["panel"]), make_point, _memory_exponent(str(first["variant"])))
    if not is_builtin(str(first["variant"])):
        curve.problem = not_predicted(str(first["variant"]))
    for n, value in zip(rows["seq_len"], rows["predicted_peak_bytes"]):
        if not pd.isna(value) and value > 0:  # a 0-byte peak from a record would end in log(0)
            curve.known[int(n)] = float(value)
    for n in range(MIN_EXP, MAX_EXP + 1):  # earlier renders' predictions
        try:
            value = cache.get(make_point(1 << n).key_text())
        except Exception:  # a shape that cannot exist (cannot happen for sane runs)
            value = None
        if value is not None:
            curve.known.setdefault(1 << n, float(value))
    return curve


def _memory_exponent(variant: str) -> Optional[float]:
    exponents = expected_exponents(variant)
    return float(exponents[0]) if exponents else None


def _batch_rule(rows: pd.DataFrame) -> Callable[[int], int]:
    """A fixed batch, or tokens per batch held constant (batch = tokens // n) when the run did."""
    tokens = set(rows["batch"] * rows["seq_len"])
    if rows["batch"].nunique() > 1 and len(tokens) == 1:
        total = int(tokens.pop())
        return lambda n: max(1, total // n)
    batch = int(rows.sort_values("seq_len")["batch"].iloc[-1])
    return lambda n: batch


def add_predictions(run_dir: Path, entries: dict, warn: Optional[Warn] = None) -> None:
    """Merge predictions made elsewhere (the sweep's capacity phase) into the cache."""
    cache, bad = _read_cache(run_dir, warn)
    cache.update(entries)
    render_cache.write_cache(run_dir, cache, force=bad)
