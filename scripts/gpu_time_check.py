#!/usr/bin/env python3
"""The time model against a real GPU sweep: scripts/gpu_check.sh's `time` stage.

A CUDA sweep on a GPU the table knows records, per point, the measured medians
(time_fwd_ms, time_bwd_ms) and the model's step time for that GPU (predicted_time_*,
profiler/runner/estimate.py). This script scores them as the report does
(reports/time_accuracy.py), writes $OUT/time-comparison.csv and replaces the section
"## Step time: the model against this GPU" of the doc (default docs/measured-gpu.md).

    python scripts/gpu_time_check.py --out OUT --runs RUN [RUN ...] [--environment env.json] [--doc FILE.md]

GPU points of the check's sweep take milliseconds, so every ok point is scored here
(--min-ms, default 0.5 ms), not only those over the CPU benchmark's 50 ms.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from attnprof.profiler.runner.storage import read_records
from attnprof.reports.time_accuracy import accuracy, by_group, fmt_ratio, pairs, summary_line

SECTION = "## Step time: the model against this GPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where time-comparison.csv goes")
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="the check's sweep run folders")
    parser.add_argument("--environment", type=Path, default=None, help="the environment stage's JSON")
    parser.add_argument("--doc", type=Path, default=None, help="also write its section of this Markdown file")
    parser.add_argument("--min-ms", type=float, default=0.5, help="score points measured at least this long")
    args = parser.parse_args()
    records = [r for run in args.runs for r in read_records(run)]
    found = pairs(records)
    if not found:
        print("HEADLINE: no ok point with both a measured and a predicted time (is the GPU in the table? "
              "attnprof gpus)")
        return 1
    env_path = args.environment
    device = json.loads(env_path.read_text()).get("device_name", "") if env_path and env_path.is_file() else ""
    with open(args.out / "time-comparison.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["variant", "mode", "seq_len", "measured_ms", "predicted_ms", "predicted_over_measured"])
        for p in found:
            writer.writerow([p.label, p.mode, p.seq_len, round(p.measured_ms, 4), round(p.predicted_ms, 4),
                             round(p.predicted_ms / p.measured_ms, 4)])
    acc = accuracy(found, args.min_ms)
    lines = [SECTION, "",
             f"Device: {device or 'unknown'}. Sweep: `scripts/gpu_check.sh` (its `POINTS`), measured medians of "
             f"5 repeats against the time model for this GPU's table entry (docs/time-model.md).", "",
             summary_line(acc, args.min_ms), "",
             "| variant | mode | n | measured ms | predicted ms | predicted / measured |", "|---|---|---|---|---|---|"]
    lines += [f"| {p.label} | {p.mode} | {p.seq_len} | {p.measured_ms:.3f} | {p.predicted_ms:.3f} | "
              f"{fmt_ratio(p.predicted_ms / p.measured_ms)} |" for p in found]
    groups = by_group(found, min_measured_ms=args.min_ms)
    lines += ["", "Median predicted / measured by variant: "
              + ", ".join(f"{g.key[0]} {fmt_ratio(g.median_ratio)}" for g in groups), ""]
    if args.doc:
        text = args.doc.read_text() if args.doc.is_file() else "# Measured on a GPU\n\n"
        head = text.split(SECTION)[0].rstrip() + "\n\n"
        args.doc.write_text(head + "\n".join(lines))
    print("\n".join(lines))
    print(f"HEADLINE: {summary_line(acc, args.min_ms)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
