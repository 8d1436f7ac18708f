"""The GPU memory and time models against the points measured on a real GPU (issue 39).

    .venv/bin/python scripts/gpu_models_vs_measured.py [tests/data/h200-2026-12-04/points.json] [--gpu h200]
    .venv/bin/python scripts/gpu_models_vs_measured.py --claims
    .venv/bin/python scripts/gpu_models_vs_measured.py --bytes

One row per measured point: measured / model for the allocator's allocated and reserved peaks,
NVML's process total, and forward+backward time; then the median and the extremes of each.
``--claims``: then the ranges profiler/hardware/checked.toml may state for these points
(rounded outward), and where its check of this file says more than the models hold to
(exit 1 if anywhere). ``--bytes``: then, per point, measured minus model in bytes for allocated,
reserved and NVML's total (a ratio of 1.000 can hide a few MiB: this is where a missing mechanism
shows first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200-2026-12-04" / "points.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points", nargs="?", default=str(DEFAULT))
    parser.add_argument("--gpu", default=None, help="GPU table key (default: the file's gpu_table_key)")
    parser.add_argument("--claims", action="store_true", help="also hold checked.toml's claims to these points")
    parser.add_argument("--bytes", action="store_true", help="also print measured - model in bytes per point")
    args = parser.parse_args()
    from attnprof.errors import UserError

    try:
        return _main(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(args) -> int:
    from attnprof.profiler.hardware.gpus import get_gpu
    from attnprof.profiler.predict.measured_gpu import RATIOS, compare, load_measured, ratio_lines

    env, measured = load_measured(Path(args.points))
    gpu = get_gpu(args.gpu or env.get("gpu_table_key") or "h200")
    rows = compare(measured, gpu)
    print("\n".join(ratio_lines(rows, gpu.key, source=args.points)))
    for c in RATIOS:
        v = [r[c] for r in rows if r[c] is not None]
        if v:
            print(f"{c}: n={len(v)} median {statistics.median(v):.3f} min {min(v):.3f} max {max(v):.3f} "
                  f"median |r-1| {statistics.median(abs(x - 1) for x in v):.3f}")
    if args.bytes:
        print("\nmeasured - MODEL, bytes (allocated, reserved, NVML total)")
        for r in rows:
            diffs = [None if r[f"{k}_measured_bytes"] is None or r[f"{k}_model_bytes"] is None
                     else r[f"{k}_measured_bytes"] - r[f"{k}_model_bytes"] for k in ("allocated", "reserved", "total")]
            print(f"{r['point']:<44} " + " ".join(f"{'-' if d is None else f'{d:+,}':>16}" for d in diffs))
    return _claims(Path(args.points), env, measured, rows) if args.claims else 0


def _claims(path: Path, env: dict, measured: list, rows: list) -> int:
    from attnprof.profiler.hardware.checked import builtin_checks
    from attnprof.profiler.predict.measured_gpu import claim_problems, claimed_ranges

    ranges = claimed_ranges(rows)
    print("\nwhat profiler/hardware/checked.toml may claim for these points (rounded outward):")
    print(f"time_median_off = {ranges.pop('time_median_off', '-')}")
    print("[checks.ratios]")
    for name, (lo, hi) in ranges.items():
        print(f"{name} = [{lo:.2f}, {hi:.2f}]")
    checks = [c for c in builtin_checks() if c.measurements_path().resolve() == path.resolve()]
    if not checks:
        print(f"no check in checked.toml names {path}")
        return 0
    problems = [p for c in checks for p in claim_problems(c, env, measured, rows)]
    for p in problems:
        print(f"checked.toml says more than holds: {p}")
    print("checked.toml's claims hold" if not problems else f"{len(problems)} claim(s) do not hold")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
