#!/usr/bin/env python3
"""How close the time model's predicted step time is to the measured one, on a run folder
(issue #15). Goals, over ok points measured at 50 ms or more (fwd+bwd): the median of
|ln(predicted / measured)| at most ln 1.5 (printed "1.50×"), its 90th percentile at most
ln 2.5. Prints the error distribution against the goals, then per variant and per variant
× mode the median signed error and the point furthest off, then the points furthest off:

    .venv/bin/python scripts/bench_time_model.py RUN_DIR [--source calibrated|gpu] [--min-ms 50]
    .venv/bin/python scripts/bench_time_model.py            # sweeps the default scenario first
    .venv/bin/python scripts/bench_time_model.py RUN_DIR --repredict [--recalibrate]

``--repredict`` recomputes ``predicted_time_*`` of the run's ok records with the current
model and this machine's calibration (at the run's torch thread count; ``--recalibrate``
measures it again instead of reading the cache), from each point's op rows
(``predict.fake_run.predict``, cached after the first time), so the model can be iterated on
without sweeping again. The run folder is not changed.

Without RUN_DIR it runs ``.venv/bin/attnprof sweep --out DIR --no-report`` into a fresh
temporary folder (the default scenario: minutes on a laptop CPU; ``--sweep-arg`` passes
more flags, e.g. ``--sweep-arg=--max-len=2048``) and keeps the folder (its path is printed).
Predictions come from this machine's calibrated rates (a sweep calibrates on first use,
cached; ``attnprof calibrate`` measures again: docs/time-model.md). ``--source gpu``
compares the model for a named GPU (``sweep --gpu``) instead, which only means something
when the run measured on that GPU.

Exit status: 0 goals met, 1 goals missed, 2 nothing to judge (no folder, no prediction,
no point long enough). A benchmark, not a test: the statistics themselves are tested in
tests/reports/test_time_accuracy.py (reports/time_accuracy.py, shared with the report).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from attnprof.profiler.runner.storage import RESULTS_FILE, read_records
from attnprof.reports import time_accuracy as ta

WORST_SHOWN = 8  # points furthest off, listed at the end


def repredict(records: list[dict], run: Path, recalibrate: bool) -> list[dict]:
    """The ok records with predicted_time_* recomputed by the current model (copies)."""
    import json

    from attnprof.profiler.measure.device_kernels import on_device
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.records import IDENTITY_FIELDS, Point, Shape
    from attnprof.profiler.timemodel.fields import time_fields
    from attnprof.profiler.timemodel.machine import calibration
    from attnprof.profiler.timemodel.rates import cpu_rates

    try:
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        threads = manifest["settings"].get("threads") or manifest["environment"].get("torch_threads")
    except (OSError, ValueError, KeyError, TypeError):
        threads = None
    cal, cached = calibration(threads, use_cache=not recalibrate)
    print(f"repredicting with the calibration of {cal.measured_at} at {cal.threads} thread(s) "
          f"({'cached' if cached else f'measured now, {cal.wall_s:.1f} s'})", file=sys.stderr)
    rates = cpu_rates(cal)
    shape_names = set(Shape.__dataclass_fields__)
    out = []
    for record in records:
        if record.get("status") != "ok":
            continue
        ident = {f: record.get(f) for f in IDENTITY_FIELDS}
        shape = Shape(**{k: v for k, v in ident.items() if k in shape_names})
        point = Point(variant=ident["variant"], mode=ident["mode"], scope=ident["scope"], shape=shape,
                      forward_only=bool(ident["forward_only"]))
        point = on_device(point, record.get("device") or "cpu")  # the step as the run's device ran it (issue 39)
        out.append({**record, **time_fields(point, predict(point).op_costs, rates)})
    return out


def attnprof_command() -> list[str]:
    script = Path(sys.executable).parent / "attnprof"
    return [str(script)] if script.exists() else [sys.executable, "-m", "attnprof"]


def sweep(extra: list[str]) -> Path:
    """The default sweep into a new temporary folder (kept: the measurement is the slow part)."""
    run = Path(tempfile.mkdtemp(prefix="attnprof-timemodel-")) / "run"
    cmd = [*attnprof_command(), "sweep", "--out", str(run), "--no-report", *extra]
    print("$ " + " ".join(cmd), file=sys.stderr)
    code = subprocess.run(cmd).returncode
    print(f"run folder: {run}" + (f" (the sweep exited {code}: scoring what finished)" if code else ""),
          file=sys.stderr)
    return run


def distribution(found: list[ta.Pair], min_ms: float) -> None:
    acc = ta.accuracy(found, min_ms)
    print(ta.summary_line(acc, min_ms))
    kept = ta.scored(found, min_ms)
    if not kept:
        return
    sizes = [abs(p.log_ratio) for p in kept]
    quantiles = ", ".join(f"p{round(q * 100)} {ta.fmt_factor(math.exp(ta.quantile(sizes, q)))}"
                          for q in (0.25, 0.5, 0.75, 0.9, 1.0))
    print(f"  |error| quantiles: {quantiles}")
    edges = (1.0, ta.GOAL_MEDIAN_FACTOR, ta.GOAL_P90_FACTOR, math.inf)
    for low, high in zip(edges, edges[1:]):
        n = sum(1 for size in sizes if math.log(low) <= size < math.log(high))
        what = (f"within ×{high:g}" if low == 1.0 else f"beyond ×{low:g}" if high == math.inf
                else f"×{low:g}-×{high:g}")
        print(f"  {what:>12}: {n:>4} point(s)  {'#' * round(40 * n / len(kept))}")
    too_slow = sum(1 for p in kept if p.log_ratio > 0)
    print(f"  predicted too slow: {too_slow}, too fast: {len(kept) - too_slow}")


def groups(found: list[ta.Pair], min_ms: float, title: str, key) -> None:
    print(f"\n{title}, furthest off first")
    rows = ta.by_group(found, key=key, min_measured_ms=min_ms)
    if not rows:
        print("  none")
    for g in rows:
        mark = "  <- off" if max(g.median_ratio, 1 / g.median_ratio) > ta.GOAL_MEDIAN_FACTOR else ""
        print(f"  {' · '.join(map(str, g.key)):44} {g.count:>4} pt  median {ta.fmt_ratio(g.median_ratio):18} "
              f"|error| {ta.fmt_factor(g.median_factor):>7}  furthest {ta.fmt_ratio(g.worst_ratio)}{mark}")


def worst(found: list[ta.Pair], min_ms: float) -> None:
    kept = sorted(ta.scored(found, min_ms), key=lambda p: -abs(p.log_ratio))[:WORST_SHOWN]
    if kept:
        print(f"\nFurthest off ({len(kept)} of the scored points)")
    for p in kept:
        print(f"  {p.label:28} {p.mode:10} n={p.seq_len:<7} measured {p.measured_ms:9.1f} ms  "
              f"predicted {p.predicted_ms:9.1f} ms  {ta.fmt_ratio(p.predicted_ms / p.measured_ms)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, help="a run folder (default: sweep the default scenario)")
    parser.add_argument("--source", choices=sorted(ta.SOURCES), default="calibrated",
                        help="calibrated: this machine's rates (predicted_time_*); gpu: the named GPU's (gpu_time_*)")
    parser.add_argument("--min-ms", type=float, default=ta.MIN_MEASURED_MS,
                        help="score points measured at least this long (fwd+bwd, ms)")
    parser.add_argument("--sweep-arg", action="append", default=[], help="one more flag for the default sweep")
    parser.add_argument("--repredict", action="store_true",
                        help="recompute predicted_time_* with the current model and calibration (folder unchanged)")
    parser.add_argument("--recalibrate", action="store_true", help="with --repredict: measure this machine again")
    args = parser.parse_args()
    run = args.run if args.run is not None else sweep(args.sweep_arg)
    if not (run / RESULTS_FILE).is_file():
        print(f"bench_time_model: {run} has no {RESULTS_FILE} (is it a run folder?)", file=sys.stderr)
        return 2
    records = read_records(run)
    if args.repredict:
        records = repredict(records, run, args.recalibrate)
    found = ta.pairs(records, source=args.source)
    ok = sum(1 for r in records if r.get("status") == "ok")
    print(f"{run}: {len(records)} record(s), {ok} ok, {len(found)} with a measured and a predicted step time "
          f"({args.source})")
    if not found:
        print("Nothing to judge: no ok point has a prediction (records from before the time model lack it; "
              "a failed calibration leaves it out, and the sweep says why).")
        return 2
    distribution(found, args.min_ms)
    acc = ta.accuracy(found, args.min_ms)
    if acc.count == 0:  # for information only: every point, none of them scored
        groups(found, 0.0, f"Per variant × mode, points under {args.min_ms:g} ms (not scored)",
               lambda p: (p.label, p.mode))
        return 2
    groups(found, args.min_ms, "Per variant (scored points)", lambda p: (p.label,))
    groups(found, args.min_ms, "Per variant × mode (scored points)", lambda p: (p.label, p.mode))
    worst(found, args.min_ms)
    return 0 if acc.meets_goals else 1


if __name__ == "__main__":
    sys.exit(main())
