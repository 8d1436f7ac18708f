#!/usr/bin/env python3
"""What each CUDA library takes outside the caching allocator, one step at a time, in a fresh process (issue 39).

    python3 scripts/gpu_library_probe.py --out library-probe.json [--device cuda|cpu]

On the first H200 the GPU memory model matched the allocator to the byte, yet NVML's process
total exceeded the context plus the allocator's reserved bytes by 20 MiB (points running cuDNN
attention only), 92 MiB (fp32 memory-efficient attention only) and 222-240 MiB (any point
running cuBLAS): device memory that libraries take for themselves (handles, lazily loaded kernel
modules, the local memory the driver sizes for the largest kernel launched). Those figures came
from whole steps, so they do not say which library took what, nor whether the shares add up.

This script starts from nothing but the CUDA context and runs one kind of kernel after another
on small tensors; after each step it reads NVML's figure for this process and torch's reserved
bytes, and records what lies outside the allocator and how much the step added to it. Every
figure is measured; none is modelled. It must run first in its process (it says so if CUDA was
already initialised). On a CPU (--device cpu) it only runs the same ops, with no figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

MIB = 1 << 20


def _steps(torch, device: str) -> list:
    """(name, fn) in order: the kernels a model step runs, each library's first use on its own.
    The inputs are made after the context step (their randn kernels are a step of their own)."""
    import torch.nn.functional as F

    bf16 = torch.bfloat16 if device == "cuda" else torch.float32
    t: dict = {}

    def inputs():
        t["x"] = torch.randn(256, 1024, device=device)
        t["xb"] = t["x"].to(bf16)
        t["w"] = torch.randn(1024, 1024, device=device, dtype=bf16)
        t["b"] = torch.randn(1024, device=device, dtype=bf16)
        t["q"] = torch.randn(1, 16, 256, 64, device=device, dtype=bf16, requires_grad=True)
        t["q32"] = torch.randn(1, 16, 256, 64, device=device, requires_grad=True)

    def sdpa(kind, name):
        def run():
            from torch.nn.attention import SDPBackend, sdpa_kernel

            q = t[name]
            with sdpa_kernel(getattr(SDPBackend, kind)):
                F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        return run

    return [
        ("context", lambda: torch.zeros(1, device=device)),
        ("inputs (randn, casts)", inputs),
        ("elementwise (add, mul; fp32 and bf16)", lambda: (t["x"] + 1, t["xb"] * 2)),
        ("reductions (column sum, full sum)", lambda: (t["x"].sum(0), t["x"].sum())),
        ("layer_norm, gelu, softmax forward and backward (bf16; autograd's device thread starts)",
         lambda: F.softmax(F.gelu(F.layer_norm(t["xb"].clone().requires_grad_(), (1024,))), -1).sum().backward()),
        ("cuBLAS: mm bf16 (forward thread)", lambda: t["xb"] @ t["w"]),
        ("cuBLASLt: addmm with a bias vector bf16", lambda: F.linear(t["xb"], t["w"], t["b"])),
        ("cuBLAS on autograd's device thread: a linear layer's backward",  # the weight's gradient: an mm there
         lambda: F.linear(t["xb"], t["w"].clone().requires_grad_()).sum().backward()),
        ("cuBLAS: bmm bf16", lambda: torch.bmm(t["q"].detach()[0], t["q"].detach()[0].transpose(1, 2))),
        ("cuBLAS: mm fp32", lambda: t["x"] @ t["x"].t()),
        ("cuDNN attention bf16, forward and backward", sdpa("CUDNN_ATTENTION", "q")),
        ("flash attention bf16, forward and backward", sdpa("FLASH_ATTENTION", "q")),
        ("memory-efficient attention fp32, forward and backward", sdpa("EFFICIENT_ATTENTION", "q32")),
    ]


def _process_bytes(device_index: int):
    """(this process's bytes as NVML lists them, why not)."""
    from attnprof.profiler.gpumeasure.nvml import NvmlSampler

    with NvmlSampler(device_index) as s:
        pass
    return s.baseline_process_bytes, s.note


def probe(device: str) -> dict:
    import torch

    already = device == "cuda" and torch.cuda.is_initialized()
    rows, before = [], None
    for name, fn in _steps(torch, device):
        row: dict = {"step": name}
        if device != "cuda" and "attention" in name:
            row["skipped"] = "a CUDA kernel"
            rows.append(row)
            continue
        try:
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a kernel this GPU or build lacks: said, and the next step runs
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        if device == "cuda":
            nvml, why = _process_bytes(torch.cuda.current_device())
            reserved = torch.cuda.memory_reserved()
            outside = None if nvml is None else nvml - reserved
            row.update(nvml_process_bytes=nvml, reserved_bytes=reserved, outside_allocator_bytes=outside,
                       added_outside_bytes=None if outside is None or before is None else outside - before)
            if why:
                row["nvml_note"] = why
            before = outside if outside is not None else before
        rows.append(row)
    out = {"what": "device memory outside the caching allocator after each step, in one fresh process: MEASURED "
                   "(NVML process bytes minus torch.cuda.memory_reserved); not modelled",
           "device": device, "torch": torch.__version__, "steps": rows}
    if device == "cuda":
        out.update(device_name=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                   lazy_loading=os.environ.get("CUDA_MODULE_LOADING", "(unset: LAZY since CUDA 12.2)"))
    if already:
        out["warning"] = "CUDA was initialised before the probe: the context step is not the first use"
    return out


def headline(doc: dict) -> str:
    parts = []
    for r in doc["steps"]:
        if r.get("error"):
            parts.append(f"{r['step'].split(':')[0].split(' (')[0]} failed")
        elif r.get("added_outside_bytes") is not None and r["added_outside_bytes"] != 0:
            parts.append(f"{r['step'].split(':')[0].split(' (')[0]} {r['added_outside_bytes'] / MIB:+.0f} MiB")
        elif r["step"] == "context" and r.get("outside_allocator_bytes") is not None:
            parts.append(f"context {r['outside_allocator_bytes'] / MIB:.0f} MiB")
    return "outside the allocator: " + (", ".join(parts) if parts else f"no figures ({doc['device']})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device visible (use --device cpu to check the script)", file=sys.stderr)
            return 2
    doc = probe(args.device)
    Path(args.out).write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    print("HEADLINE: " + headline(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
