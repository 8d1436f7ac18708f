#!/usr/bin/env python3
"""Where a measured point's step time goes on the GPU, kernel by kernel (issue 39).

The time model is 1.1-3.1x optimistic on the first H200's 14 timed points, and the
measured totals alone cannot say which kernels or how much host time make up the gap
(docs/time-model.md, "What is left"). This script runs each point's whole step (the
Workload a sweep measures: forward and backward) under ``torch.profiler`` and writes, per
point, every kernel the GPU ran (name, launches, device milliseconds), the device's busy
time against the step's span (what is left is the GPU waiting for the host), and the
aten ops' host time under the profiler (inflated by it; said in the file). The step is
also timed without the profiler (CUDA events). Every figure is measured; none is modelled:
scripts/gpu_models_vs_measured.py puts the model beside them on any machine.

    python3 scripts/gpu_step_profile.py --out steps.json
        [--points sdpa:plain:4096,full:plain:8192,...] [--d-model 1024 --heads 16 --layers 2 --dtype bfloat16]

The default points are one of each kind timed on 2026-12-04, at that shape. On a CPU
(--device cpu, tiny shapes) it checks only that the script works: CPU ops, no kernels.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

DEFAULT_POINTS = "sdpa:plain:4096,sdpa:checkpoint:4096,sdpa:plain:16384,full:plain:8192,lsh:plain:8192," \
                 "sparse_strided:plain:8192"
TOP = 30  # kernels and aten ops kept per point (by time); the rest summed as one row
# a kernel's coarse kind, from its name (for the headline only; every name is kept as it is)
KINDS = (("attention", r"fmha|flash|cudnn|attention|sdpa"), ("gemm", r"gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_"),
         ("softmax", r"softmax"), ("reduce", r"reduce|norm"), ("elementwise", r"elementwise|vectorized|unrolled"),
         ("copy_or_index", r"copy|cat|index|gather|scatter|sort|radix|fill"))


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, pattern in KINDS if re.search(pattern, low)), "other")


def _point(spec: str, args):
    """The Point of VARIANT:MODE:LENGTH at the given shape; SystemExit (one line, code 2) when it is no point."""
    from attnprof.errors import UserError
    from attnprof.profiler.records import MODES, Point, Shape
    from attnprof.scenarios.variants.registry import spec_of

    try:
        variant, mode, n = spec.split(":")
        shape = Shape(batch=1, seq_len=int(n), d_model=args.d_model, heads=args.heads, layers=args.layers,
                      dtype=args.dtype)
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is none of {', '.join(MODES)}")
        point = Point(variant, mode, "model", shape)
        spec_of(point)  # an unknown variant: refused here, before any point runs
        return point
    except (ValueError, TypeError, UserError) as exc:
        print(f"gpu_step_profile: point {spec!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
              f" (VARIANT:MODE:LENGTH)", file=sys.stderr)
        raise SystemExit(2) from None


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def step_ms(work, device: str, repeats: int) -> list[float]:
    """Milliseconds of whole steps without the profiler (CUDA events; the wall clock on a CPU)."""
    import torch

    out = []
    for _ in range(repeats):
        work.zero_grad()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work.step()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            work.step()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _rows(table: dict, total_key: str) -> list[dict]:
    rows = sorted(table.values(), key=lambda r: -r[total_key])
    kept, rest = rows[:TOP], rows[TOP:]
    if rest:
        kept.append({"name": f"({len(rest)} others)", "count": sum(r["count"] for r in rest),
                     total_key: sum(r[total_key] for r in rest), "kind": "others"})
    return kept


def profile_step(work, device: str) -> dict:
    """One step under torch.profiler: kernels (device time), the device's busy time within the
    step's kernel span, aten ops (host time, under the profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    work.zero_grad()
    _sync(device)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        work.step()
        _sync(device)
    wall_ms = (time.perf_counter() - t0) * 1e3
    kernels: dict = {}
    ops: dict = {}
    starts, ends, busy_us = [], [], 0.0
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            us = e.time_range.elapsed_us()
            busy_us += us
            starts.append(e.time_range.start)
            ends.append(e.time_range.end)
            row = kernels.setdefault(e.name, {"name": e.name[:160], "count": 0, "device_ms": 0.0,
                                              "kind": kind_of(e.name)})
            row["count"] += 1
            row["device_ms"] += us / 1e3
        elif e.name.startswith("aten::"):
            row = ops.setdefault(e.name, {"name": e.name, "count": 0, "self_host_ms": 0.0})
            row["count"] += 1
            row["self_host_ms"] += e.self_cpu_time_total / 1e3
    span_ms = (max(ends) - min(starts)) / 1e3 if starts else None
    by_kind: dict = {}
    for k in kernels.values():
        by_kind[k["kind"]] = by_kind.get(k["kind"], 0.0) + k["device_ms"]
    return {"profiled_wall_ms": wall_ms, "kernel_launches": sum(k["count"] for k in kernels.values()),
            "kernel_busy_ms": busy_us / 1e3, "kernel_span_ms": span_ms,
            "device_idle_ms": (span_ms - busy_us / 1e3) if span_ms is not None else None,
            "device_ms_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "aten_ops": sum(o["count"] for o in ops.values()),
            "aten_self_host_ms": sum(o["self_host_ms"] for o in ops.values()),
            "kernels": _rows(kernels, "device_ms"), "ops": _rows(ops, "self_host_ms"),
            "torch_cuda_peak_allocated_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None}


def one_point(spec: str, point, args) -> dict:
    import torch

    from attnprof.profiler.measure.workload import Workload

    row = {"point": spec, "variant": point.variant, "mode": point.mode, "seq_len": point.shape.seq_len}
    work = None
    try:
        work = Workload(point, args.device)
        for _ in range(args.warmup):
            work.zero_grad()
            work.step()
        _sync(args.device)
        samples = step_ms(work, args.device, args.repeats)
        row.update(step_ms_samples=samples, step_ms=statistics.median(samples), **profile_step(work, args.device))
    except Exception as exc:  # noqa: BLE001 - one point's failure is its row; the others still run
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    finally:
        work = None
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return row


def headline(row: dict) -> str:
    if "error" in row:
        return f"{row['point']}: {row['error']}"
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in list(row["device_ms_by_kind"].items())[:4])
    idle = f", idle {row['device_idle_ms']:.2f} ms" if row.get("device_idle_ms") is not None else ""
    return (f"{row['point']}: step {row['step_ms']:.2f} ms; kernels {row['kernel_busy_ms']:.2f} ms busy "
            f"({row['kernel_launches']} launches{idle}); {row['aten_ops']} aten ops; by kind (ms): {kinds or '-'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--points", default=DEFAULT_POINTS, help="VARIANT:MODE:LENGTH, comma-separated")
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    specs = [s.strip() for s in args.points.split(",") if s.strip()]
    if not specs or args.repeats < 1 or args.warmup < 0 or min(args.d_model, args.heads, args.layers) < 1:
        print("gpu_step_profile: give at least one point, and repeats, d_model, heads, layers of at least 1",
              file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_step_profile: no CUDA device (use --device cpu to check the script)", file=sys.stderr)
        return 2
    points = [_point(spec, args) for spec in specs]  # every point checked before any runs
    rows = []
    for spec, point in zip(specs, points):
        rows.append(one_point(spec, point, args))
        print(headline(rows[-1]), flush=True)
    doc = {"what": "whole steps under torch.profiler (scripts/gpu_step_profile.py): measured, not modelled; "
                   "aten ops' host times are under the profiler, which adds to each",
           "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
           "shape": {"d_model": args.d_model, "heads": args.heads, "layers": args.layers, "dtype": args.dtype,
                     "batch": 1}, "warmup": args.warmup, "repeats": args.repeats, "points": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    failed = [r for r in rows if "error" in r]
    print(f"HEADLINE: {len(rows) - len(failed)} of {len(rows)} steps profiled"
          + (f"; failed: {failed[0]['error']}" if failed else "") + f"; {Path(args.out).name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
