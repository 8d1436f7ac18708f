#!/usr/bin/env python3
"""Time, one by one, the kernels the GPU time model could not pin down on the first H200 (issue 39).

docs/time-model.md ("Against a real H200") names what is left: the softmax forward over long
rows (its achieved bandwidth), the per-op host cost of eager PyTorch on the lent machine, and
the CUDA composites (masked_fill, softmax backward) as they really run. This script measures
each alone, so that the model's figures can cite a measurement instead of a guess:

    python3 scripts/gpu_kernel_probe.py --out probe.json [--lengths 4096,8192,16384] [--heads 16]

Per length n, on (1, heads, n, n) scores of --dtype: softmax forward (of random and of causally
masked scores) and backward, the
out-of-place masked_fill with an (n, n) bool mask broadcast over the heads (full attention's
causal mask), a clone (the streaming reference), and the QK^T bmm (heads, n, 64) x (heads, 64, n).
Each kernel's time is the median of --repeats after --warmup runs (CUDA events on a GPU, the
wall clock on a CPU), with bytes moved as the model's op rows count them (inputs read + output
written) and the resulting bytes/s. Then the host: the wall time of a tight loop of a tiny
in-place op, and of a tiny nn.Linear forward, per call. Every figure is measured here; none is
modelled. A CPU run (--device cpu, small --lengths) only checks that the script works.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HEAD_DIM = 64


def _timer(device: str, fn, warmup: int, repeats: int) -> float:
    """Median seconds of fn() over repeats, after warmup calls."""
    import torch

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _row(name: str, n: int, seconds: float, nbytes: int) -> dict:
    return {"kernel": name, "n": n, "time_ms": seconds * 1e3, "bytes": nbytes,
            "bytes_per_s": nbytes / seconds if seconds > 0 else None}


def kernels(device: str, dtype, n: int, heads: int, warmup: int, repeats: int) -> list[dict]:
    """The score-sized kernels at length n (each tensor freed before the next length)."""
    import torch

    es = torch.finfo(dtype).bits // 8
    s = torch.randn(1, heads, n, n, device=device, dtype=dtype)  # (1, h, n, n) scores
    numel = s.numel()
    mask = torch.ones(n, n, device=device, dtype=torch.bool).triu_(1)  # (n, n) causal mask
    rows = [_row("clone", n, _timer(device, lambda: s.clone(), warmup, repeats), 2 * numel * es)]
    value = torch.finfo(dtype).min
    rows.append(_row("masked_fill", n, _timer(device, lambda: s.masked_fill(mask, value), warmup, repeats),
                     numel * es + mask.numel() + numel * es))
    rows.append(_row("softmax_fwd", n, _timer(device, lambda: torch.softmax(s, -1), warmup, repeats), 2 * numel * es))
    masked = s.masked_fill(mask, value)  # what `full` feeds its softmax: causally masked scores (the upper
    # triangle at the dtype's minimum), whose speed may differ from random scores' (pytorch issue 91582)
    rows.append(_row("softmax_fwd_masked", n, _timer(device, lambda: torch.softmax(masked, -1), warmup, repeats),
                     2 * numel * es))
    del masked
    y = torch.softmax(s, -1)
    g = torch.randn_like(y)
    rows.append(_row("softmax_bwd", n, _timer(device, lambda: torch._softmax_backward_data(g, y, -1, dtype),
                                                 warmup, repeats), 3 * numel * es))
    del s, y, g, mask
    q = torch.randn(heads, n, HEAD_DIM, device=device, dtype=dtype)  # (h, n, 64)
    k = torch.randn(heads, HEAD_DIM, n, device=device, dtype=dtype)  # (h, 64, n)
    rows.append(_row("bmm_qk", n, _timer(device, lambda: torch.bmm(q, k), warmup, repeats),
                     (q.numel() + k.numel() + heads * n * n) * es))
    rows[-1]["flops"] = 2 * heads * n * n * HEAD_DIM
    return rows


def host(device: str, calls: int) -> list[dict]:
    """Host seconds per call of a tiny in-place op and of a tiny nn.Linear forward (with grad)."""
    import torch

    x = torch.zeros(1, device=device)
    lin = torch.nn.Linear(8, 8, device=device)
    inp = torch.randn(1, 8, device=device, requires_grad=True)
    out = []
    for name, fn in (("add_ (1 element)", lambda: x.add_(1.0)), ("nn.Linear(8, 8) forward", lambda: lin(inp))):
        for _ in range(50):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host_s = time.perf_counter() - t0  # launches only: the GPU may still be running them
        if device == "cuda":
            torch.cuda.synchronize()
        out.append({"op": name, "calls": calls, "host_us_per_call": host_s / calls * 1e6})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    # 4K-16K as measured on 2026-12-04, and 9K/10K either side of SoftMax.cu's switch between its
    # register and shared-memory kernels for bf16 rows (docs/time-model.md, "What is left")
    parser.add_argument("--lengths", default="4096,8192,9216,10240,16384")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--host-calls", type=int, default=2000)
    args = parser.parse_args()
    try:
        lengths = [int(v) for v in args.lengths.split(",") if v.strip()]
    except ValueError:
        print(f"gpu_kernel_probe: --lengths {args.lengths!r} is not a comma-separated list of whole numbers",
              file=sys.stderr)
        return 2
    if not lengths or min(lengths) < 1 or args.heads < 1 or args.repeats < 1 or args.warmup < 0 or args.host_calls < 1:
        print("gpu_kernel_probe: lengths, heads, repeats and host calls must be at least 1", file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_kernel_probe: no CUDA device (use --device cpu to check the script)", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    rows = []
    for n in lengths:
        rows += kernels(args.device, dtype, n, args.heads, args.warmup, args.repeats)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    doc = {"what": "kernels timed alone (scripts/gpu_kernel_probe.py): measured, not modelled",
           "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "torch": torch.__version__, "dtype": args.dtype, "heads": args.heads, "head_dim": HEAD_DIM,
           "warmup": args.warmup, "repeats": args.repeats, "kernels": rows, "host": host(args.device, args.host_calls)}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    for r in rows:
        rate = f"{r['bytes_per_s'] / 1e9:9.1f} GB/s" if r["bytes_per_s"] else "-"
        print(f"{r['kernel']:<12} n={r['n']:<6} {r['time_ms']:9.3f} ms  {rate}")
    for h in doc["host"]:
        print(f"host {h['op']:<24} {h['host_us_per_call']:7.2f} us per call")
    soft = [r for r in rows if r["kernel"] == "softmax_fwd" and r["bytes_per_s"]]
    print("HEADLINE: softmax forward " + ", ".join(f"n={r['n']} {r['bytes_per_s'] / 1e9:.1f} GB/s" for r in soft)
          + "; host " + ", ".join(f"{h['op']} {h['host_us_per_call']:.1f} us" for h in doc["host"])
          + f"; {Path(args.out).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
