"""Measured vs modelled GPU memory for a small grid: the `gpu-model` stage of scripts/gpu_check.sh.

    python scripts/gpu_model_check.py --out results/gpu [--gpu h200] [--doc docs/measured-gpu.md]

Each point is measured in a fresh process (a clean allocator and CUDA context): the CUDA
context alone as NVML sees it (``nvml_context_bytes``), then the point's step with the
sweep's own memory pass (``profiler/gpumeasure/allocator_pass.cuda_memory_pass``: allocator
allocated and reserved peaks, NVML process peak), then the SDPA backend torch actually picked (the
grad_fn of a probe call with the same head_dim and dtype). The parent predicts the same
points with the GPU memory model (``attnprof.profiler.memmodel``; fake tensors, on the CPU)
and writes ``OUT/gpu-model.csv`` (and, with ``--doc``, the Markdown table). Needs a CUDA
GPU, except with ``--dry-run`` (model only); about two minutes (``--point-timeout`` each).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# variant, scope, mode, dtype, seq_len (batch 1, d_model 1024, 16 heads, 2 layers at scope model)
GRID = [
    ("sdpa", "attention", "none", "bfloat16", 4096),
    ("sdpa", "attention", "none", "bfloat16", 16384),
    ("sdpa", "attention", "none", "float32", 4096),
    ("full", "attention", "none", "bfloat16", 4096),
    ("sdpa", "model", "plain", "bfloat16", 4096),
    ("sdpa", "model", "plain", "bfloat16", 16384),
    ("sdpa", "model", "checkpoint", "bfloat16", 16384),
    ("sdpa", "model", "plain", "float32", 4096),
    ("full", "model", "plain", "bfloat16", 4096),
]
SHAPE = dict(batch=1, d_model=1024, heads=16, layers=2)
GRAD_FN_BACKEND = {"ScaledDotProductFlashAttentionBackward0": "flash",
                   "ScaledDotProductEfficientAttentionBackward0": "efficient",
                   "ScaledDotProductCudnnAttentionBackward0": "cudnn"}


def _point(spec):
    from attnprof.profiler.records import Point, Shape

    variant, scope, mode, dtype, n = spec
    return Point(variant, mode, scope, Shape(seq_len=n, dtype=dtype, **SHAPE))


def measure(spec) -> dict:
    """In this (fresh) process: context, then one step of the point, on cuda:0."""
    import torch
    import torch.nn.functional as F

    from attnprof.profiler.gpumeasure.allocator_pass import cuda_memory_pass
    from attnprof.profiler.gpumeasure.nvml import NvmlSampler
    from attnprof.profiler.measure.workload import Workload

    torch.cuda.synchronize()  # creates the CUDA context, allocates nothing through the allocator
    with NvmlSampler(0) as idle:
        pass
    point = _point(spec)
    work = Workload(point, "cuda")
    figures = cuda_memory_pass(work.step, "cuda")
    backend = ""
    if point.variant == "sdpa":
        q = torch.randn(1, point.shape.heads, 256, point.shape.head_dim, device="cuda",
                        dtype=point.shape.torch_dtype, requires_grad=True)
        backend = GRAD_FN_BACKEND.get(type(F.scaled_dot_product_attention(q, q, q).grad_fn).__name__, "math")
    return {**figures, "nvml_context_bytes": idle.baseline_process_bytes, "nvml_context_note": idle.note,
            "measured_sdpa_backend": backend, "device_name": torch.cuda.get_device_name(0),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}


def pick_gpu(name: str | None, device_name: str):
    from attnprof.profiler.hardware.gpus import by_device_name, get_gpu

    if name:
        return get_gpu(name)
    spec = by_device_name(device_name)
    if spec is not None:
        return spec
    raise SystemExit(f"no GPU table entry named {device_name!r}; pass --gpu KEY or add one (ATTNPROF_GPUS)")


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def mib(x):
    return "-" if x is None else f"{x / 2**20:,.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="results/gpu")
    parser.add_argument("--gpu", default=None, help="GPU table key (default: matched by device name)")
    parser.add_argument("--doc", default=None, help="also write the Markdown table here")
    parser.add_argument("--dry-run", action="store_true", help="CPU machine: model only, measurement skipped")
    parser.add_argument("--point-timeout", type=float, default=60.0)
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="measure no new point after this many seconds (0: no budget); the table is still written")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one point, JSON on stdout
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(tuple(json.loads(args.measure)))))
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    measured = []
    for spec in GRID:
        if args.dry_run:
            measured.append({"error": "dry run: not measured (no GPU)"})
            continue
        # within --budget-s: the table is written with what was measured, never lost to the stage's kill
        left = args.budget_s - (time.time() - started) if args.budget_s else args.point_timeout
        if left < min(10.0, args.point_timeout):
            measured.append({"error": f"not measured: the {args.budget_s:.0f} s budget ran out"})
            print(spec, measured[-1]["error"], flush=True)
            continue
        try:
            run = subprocess.run([sys.executable, __file__, "--measure", json.dumps(spec)], capture_output=True,
                                 text=True, timeout=min(args.point_timeout, left))
            line = run.stdout.strip().splitlines()[-1] if run.returncode == 0 and run.stdout.strip() else ""
            measured.append(json.loads(line) if line else {"error": (run.stderr.strip().splitlines() or ["?"])[-1]})
        except subprocess.TimeoutExpired:
            measured.append({"error": f"timed out after {min(args.point_timeout, left):.0f} s"})
        print(spec, measured[-1].get("error") or "measured", flush=True)
    device = next((m["device_name"] for m in measured if "device_name" in m), "")
    if not args.dry_run and not device:  # nothing measured: say why in the stage's line, model nothing
        errors = [m.get("error", "?") for m in measured]
        print(f"HEADLINE: 0/{len(GRID)} measured; commonest error: {max(set(errors), key=errors.count)[:160]}")
        return 1
    gpu = pick_gpu(args.gpu or ("h200" if args.dry_run else None), device)

    from attnprof.profiler.memmodel.gpu_peak import TraceCache
    from attnprof.profiler.predict.gpu_points import predict_gpu

    rows = []
    for spec, m in zip(GRID, measured):
        p = predict_gpu(_point(spec), gpu, TraceCache())
        ctx = m.get("nvml_context_bytes")
        rows.append({
            "variant": spec[0], "scope": spec[1], "mode": spec[2], "dtype": spec[3], "seq_len": spec[4],
            "error": m.get("error", ""),
            "model_sdpa_backend": p.sdpa_backend, "measured_sdpa_backend": m.get("measured_sdpa_backend", ""),
            "predicted_peak_bytes": p.traced_peak_bytes,
            "model_allocated_bytes": p.allocated_peak_bytes, "measured_allocated_bytes": m.get("measured_peak_bytes"),
            "allocated_measured_over_model": ratio(m.get("measured_peak_bytes"), p.allocated_peak_bytes),
            "model_reserved_bytes": p.reserved_peak_bytes, "measured_reserved_bytes": m.get("cuda_reserved_peak_bytes"),
            "reserved_measured_over_model": ratio(m.get("cuda_reserved_peak_bytes"), p.reserved_peak_bytes),
            "model_context_bytes": p.context_bytes, "measured_context_bytes": ctx,
            "model_total_bytes": p.total_bytes, "measured_nvml_process_peak_bytes": m.get("nvml_process_peak_bytes"),
            "total_measured_over_model": ratio(m.get("nvml_process_peak_bytes"), p.total_bytes),
            "nvml_note": m.get("nvml_note", "") or m.get("nvml_context_note", ""),
        })
    with open(out / "gpu-model.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    env = next((m for m in measured if "torch" in m), {})
    lines = [
        "# Measured GPU memory vs the GPU memory model",
        "",
        f"Written by `scripts/gpu_check.sh` (stage `gpu-model`, `scripts/gpu_model_check.py`) on "
        f"{time.strftime('%Y-%m-%d')}: {device or 'no device'} (model entry `{gpu.key}`), torch {env.get('torch')}, "
        f"CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}. Batch 1, d_model 1024, 16 heads (head_dim 64), "
        "2 layers at scope model; forward + backward from a random upstream gradient. Each point ran in a fresh "
        "process. MiB throughout; ratios are measured / model. See docs/gpu.md for the model.",
        "",
        "| variant | scope | mode | dtype | n | SDPA model / torch | allocated model | measured | ratio "
        "| reserved model | measured | ratio | total model | NVML process peak | ratio | context model / NVML |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['variant']} | {r['scope']} | {r['mode']} | {r['dtype']} | {r['seq_len']} "
                         f"| error: {r['error'][:80]} |" + " |" * 10)
            continue
        lines.append(
            f"| {r['variant']} | {r['scope']} | {r['mode']} | {r['dtype']} | {r['seq_len']} "
            f"| {r['model_sdpa_backend'] or '-'} / {r['measured_sdpa_backend'] or '-'} "
            f"| {mib(r['model_allocated_bytes'])} | {mib(r['measured_allocated_bytes'])} "
            f"| {r['allocated_measured_over_model']} | {mib(r['model_reserved_bytes'])} "
            f"| {mib(r['measured_reserved_bytes'])} | {r['reserved_measured_over_model']} "
            f"| {mib(r['model_total_bytes'])} | {mib(r['measured_nvml_process_peak_bytes'])} "
            f"| {r['total_measured_over_model']} | {mib(r['model_context_bytes'])} / {mib(r['measured_context_bytes'])} |")
    notes = sorted({r["nvml_note"] for r in rows if r["nvml_note"]})
    lines += ["", *(f"- NVML: {n}" for n in notes), f"- {len(rows)} points in {time.time() - started:.0f} s."]
    if args.doc:
        doc = Path(args.doc)
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    done = [r for r in rows if not r["error"]]
    errors = [r["error"] for r in rows if r["error"]]
    alloc = sorted(r["allocated_measured_over_model"] for r in done if r["allocated_measured_over_model"])
    backends = sum(1 for r in done if r["model_sdpa_backend"] and r["model_sdpa_backend"] == r["measured_sdpa_backend"])
    sdpa = sum(1 for r in done if r["measured_sdpa_backend"])
    if args.dry_run:
        print(f"HEADLINE: dry run: {len(rows)} points modelled for {gpu.key}, none measured (no GPU)")
        return 0
    print(f"HEADLINE: {len(done)}/{len(rows)} measured; allocated measured/model "
          + (f"median {alloc[len(alloc) // 2]:.3f} (min {alloc[0]:.3f}, max {alloc[-1]:.3f})" if alloc else "-")
          + f"; SDPA backend as modelled in {backends}/{sdpa}"
          + (f"; commonest error: {max(set(errors), key=errors.count)[:160]}" if errors else ""))
    return 0 if done else 1


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    sys.exit(main())
