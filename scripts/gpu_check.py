#!/usr/bin/env python3
"""The Python half of scripts/gpu_check.sh: its `environment` and `compare` stages.

    python scripts/gpu_check.py environment OUT.json [--dry-run]
    python scripts/gpu_check.py compare RUN [RUN ...] --csv comparison.csv

Each prints what it found and ends with one ``HEADLINE: ...`` line, which gpu_check.sh
copies into summary.txt. ``--dry-run`` (a CPU machine: CI) runs the same code with the
CUDA and NVML parts skipped, and says so.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

# The SDPA shapes the check's sweep uses (d_model 1024 / 16 heads: head_dim 64), in both dtypes
SDPA_SHAPES = [("bfloat16", 64), ("float32", 64)]


def environment(out: Path, dry_run: bool) -> int:
    import torch

    from attnprof.profiler.gpumeasure import devices
    from attnprof.profiler.gpumeasure.nvml import nvml_available
    from attnprof.profiler.gpumeasure.sdpa_spy import SdpaSpy
    from attnprof.profiler.measure.host import device_environment

    device = "cpu" if dry_run else "cuda"
    env = {"dry_run": dry_run, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "python": sys.version.split()[0], "nvml": nvml_available()[1], **device_environment(device)}
    if not dry_run:
        env["probe"] = devices.probe()
    from attnprof.profiler.hardware.gpus import by_device_name

    gpu = by_device_name(env.get("device_name") or "")
    if gpu is None and dry_run:  # the model's code still runs: for the GPU sessions are lent
        from attnprof.profiler.hardware.gpus import get_gpu

        gpu = get_gpu("h200")
    env["gpu_table_key"] = gpu.key if gpu else None
    backends = {}
    for dtype, head_dim in SDPA_SHAPES:
        q = torch.randn(1, 16, 1024, head_dim, device=device, dtype=getattr(torch, dtype), requires_grad=True)
        with SdpaSpy() as spy:
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        model = ""
        if gpu is not None:
            from attnprof.profiler.memmodel.sdpa_choice import choose_sdpa_backend

            model = choose_sdpa_backend(gpu, dtype, head_dim).backend
        backends[f"{dtype}/d{head_dim}"] = {"torch": spy.summary(), "model": model}
    env["sdpa_backends"] = backends
    out.write_text(json.dumps(env, indent=1, default=str), encoding="utf-8")
    print(json.dumps(env, indent=1, default=str))
    picked = ", ".join(f"{k}: {v['torch']} (model {v['model'] or '-'})" for k, v in backends.items())
    where = "dry run on the CPU, CUDA and NVML skipped" if dry_run else f"{env.get('device_name')}"
    print(f"HEADLINE: {where}; torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
          f"driver {env.get('driver')}; SDPA {picked}")
    if not dry_run and not (env.get("device_name") and env.get("driver")):
        print(f"device name or driver missing: {env.get('note')}", file=sys.stderr)
        return 1
    return 0


COLUMNS = ["variant", "mode", "scope", "seq_len", "dtype", "status", "measured_by", "predicted_peak_bytes",
           "measured_peak_bytes", "measured_over_predicted", "cuda_reserved_peak_bytes", "nvml_process_peak_bytes",
           "nvml_device_peak_bytes", "nvml_baseline_bytes", "gpu_sdpa_backend_measured", "cudnn_version",
           "time_fwd_ms", "time_bwd_ms", "predicted_time_fwd_ms", "predicted_time_bwd_ms", "nvml_note", "reason"]


def compare(runs: list[Path], csv_path: Path) -> int:
    """Predicted (fake tensors) vs allocator (or tensor tracker) vs NVML, one row per point."""
    from attnprof.profiler.runner.storage import read_records
    from attnprof.profiler.units import fmt_bytes

    rows = []
    for run in runs:
        if not (run / "results.jsonl").is_file():  # a stage that ended before its first point
            print(f"{run}: no results.jsonl")
            continue
        for r in read_records(run):
            pred, meas = r.get("predicted_peak_bytes"), r.get("measured_peak_bytes")
            rows.append({**{c: r.get(c) for c in COLUMNS},
                         "measured_over_predicted": round(meas / pred, 4) if pred and meas else None})
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    ok = [r for r in rows if r["status"] == "ok" and r["measured_over_predicted"] is not None]
    for r in rows:
        print(f"{r['variant']:<16} {r['mode']:<10} n={r['seq_len']:<6} {r['status']:<8} predicted "
              f"{fmt_bytes(r['predicted_peak_bytes']):>10}  measured {fmt_bytes(r['measured_peak_bytes']):>10} "
              f"({r['measured_by'] or '-'})  reserved {fmt_bytes(r['cuda_reserved_peak_bytes']):>10}  "
              f"NVML process {fmt_bytes(r['nvml_process_peak_bytes']):>10}  SDPA {r['gpu_sdpa_backend_measured'] or '-'}")
    if not ok:
        print(f"HEADLINE: no ok point with a prediction among {len(rows)} records")
        return 1
    ratios = [r["measured_over_predicted"] for r in ok]
    statuses = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    print(f"HEADLINE: {len(rows)} points ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}); "
          f"measured/predicted peak median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}) by {ok[0]['measured_by']}")
    # a point skipped as too large for the device is the sweep doing its job; any other non-ok point fails
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    e = sub.add_parser("environment")
    e.add_argument("out", type=Path)
    e.add_argument("--dry-run", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("runs", type=Path, nargs="+")
    c.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args()
    if args.what == "environment":
        return environment(args.out, args.dry_run)
    return compare(args.runs, args.csv)


if __name__ == "__main__":
    sys.exit(main())
