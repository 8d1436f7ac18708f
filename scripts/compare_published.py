#!/usr/bin/env python3
"""The GPU time model against published attention timings (issue #15).

For each ``[[figure]]`` of ``profiler/timemodel/published.toml`` (sources and conventions:
docs/time-model.md), predicts the attention-only point of that shape with the
time model for that GPU and prints predicted against published, their ratio, and the
median and 90th percentile of |ln(predicted / published)| overall and per kernel:

    .venv/bin/python scripts/compare_published.py [--figures PATH] [--gpu-file PATH]

Nothing runs on a GPU: the op rows come from fake tensors on the CPU
(``predict.fake_run.predict(Point(variant, "none", "attention", Shape(...)))``), the rates from
the GPU table and the efficiency constants (``timemodel.rates.gpu_rates``).

Which attnprof variant and SDPA backend stand for each published kernel (``KERNELS``):
the standard PyTorch path is ``full`` (explicit scores, no SDPA); FlashAttention-2 and
torch's SDPA flash are ``sdpa`` on the ``flash`` backend; FlashAttention (v1) is costed
with the memory-efficient backend's constants (constants.py takes those from FA1's
published fraction of peak); FlashAttention-3 with cuDNN attention's (its bars sit near
FA3's); SDPA math is ``sdpa`` forced onto the math path; the Reformer baseline is ``lsh``
with its default options (the paper does not give its hash count or bucket size).
Block-sparse kernels (a butterfly or OpenAI block mask), dropout and padding masks have
no attnprof counterpart: those rows are listed as skipped, with why.

A published figure given as TFLOP/s is turned into a time with the source's own FLOP
convention (FA2/FA3: forward 4·b·n²·h·d, backward 2.5×, forward + backward 3.5×, halved
when causal). A comparison, not a test: it prints and exits 0 unless the inputs are unusable.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from attnprof.errors import UserError
from attnprof.profiler.hardware.gpus import load_gpus, get_gpu
from attnprof.profiler.records import Point, Shape, canonical_dtype
from attnprof.reports import time_accuracy as ta

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "profiler" / "timemodel" / "published.toml"
# published kernel -> (attnprof variant, SDPA backend the GPU model costs it with; None: no SDPA)
KERNELS = {
    "pytorch_standard": ("full", None),
    "sdpa_math": ("sdpa", "math"),
    "sdpa_flash": ("sdpa", "flash"),
    "flash2": ("sdpa", "flash"),
    "flash": ("sdpa", "efficient"),
    "flash3": ("sdpa", "cudnn"),
    "lsh": ("lsh", None),
}
NOT_MODELLED = {
    "block_sparse_flash": "butterfly block mask: no attnprof variant runs it",
    "block_sparse": "OpenAI block-sparse kernel: no attnprof variant runs it",
}
# FA2/FA3's FLOP convention (benchmarks/benchmark_flash_attention.py, flops()): multiples of
# the forward's 4·b·n²·h·d per pass.
PASS_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


@dataclass
class Row:
    figure: dict
    published_ms: float | None = None
    predicted_ms: float | None = None
    backend: str = ""
    skipped: str = ""  # why no comparison


def published_ms(fig: dict) -> float:
    """The figure as a time: given, or its convention's FLOPs over the reported TFLOP/s."""
    if "time_ms" in fig:
        return float(fig["time_ms"])
    flops = 4 * fig["batch"] * fig["seq_len"] ** 2 * fig["heads"] * fig["head_dim"] * PASS_FLOP_FACTOR[fig["pass"]]
    if fig.get("causal"):
        flops /= 2
    return flops / (float(fig["tflops_per_s"]) * 1e12) * 1e3


def why_skipped(fig: dict) -> str:
    if fig["kernel"] in NOT_MODELLED:
        return NOT_MODELLED[fig["kernel"]]
    if fig["kernel"] not in KERNELS:
        return f"kernel {fig['kernel']!r} has no attnprof counterpart"
    if fig.get("dropout", 0.0) or fig.get("mask", "none") != "none":
        return "dropout / padding mask: not modelled"
    return ""


def predicted_ms(fig: dict, gpus: dict) -> tuple[float | None, str]:
    """(the time model's time for the figure's pass, the SDPA backend it costed)."""
    from attnprof.profiler.predict.fake_run import predict
    from attnprof.profiler.timemodel.rates import gpu_rates
    from attnprof.profiler.timemodel.roofline import predict_time

    variant, backend = KERNELS[fig["kernel"]]
    variant = f"{variant}[causal={str(bool(fig.get('causal'))).lower()}]"
    dtype = canonical_dtype(fig["dtype"])
    shape = Shape(seq_len=fig["seq_len"], batch=fig["batch"], d_model=fig["heads"] * fig["head_dim"],
                  heads=fig["heads"], layers=1, dtype=dtype)
    rates = gpu_rates(get_gpu(fig["gpu"], gpus), backend or "flash")
    costs = predict(Point(variant, "none", "attention", shape)).op_costs
    time = predict_time(costs, rates, dtype, head_dim=fig["head_dim"])
    if time is None:
        return None, backend or "-"
    value = {"fwd": time.time_fwd_ms, "bwd": time.time_bwd_ms, "fwd_bwd": time.time_ms}[fig["pass"]]
    return value, backend or "-"


def short_source(fig: dict) -> str:
    """'FlashAttention-2 (Dao 2023, ...), Fig. 4a (...)' -> 'FlashAttention-2 Fig. 4a'."""
    text = str(fig.get("source", ""))
    paper = text.split(" (", 1)[0]
    where = text.split("), ", 1)[1].split(" (", 1)[0] if "), " in text else ""
    return f"{paper} {where}".strip()[:42]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=Path, default=FIGURES, help="published.toml (default: the project's)")
    parser.add_argument("--gpu-file", type=Path, action="append", default=[], help="more GPUs (gpus.toml form)")
    args = parser.parse_args()
    try:
        figures = tomllib.loads(args.figures.read_text(encoding="utf-8")).get("figure", [])
        gpus = load_gpus(args.gpu_file)
    except (OSError, tomllib.TOMLDecodeError, UserError) as exc:
        print(f"compare_published: {exc}", file=sys.stderr)
        return 2
    rows = []
    for fig in figures:
        row = Row(fig, skipped=why_skipped(fig))
        if not row.skipped:
            try:
                row.published_ms = published_ms(fig)
                row.predicted_ms, row.backend = predicted_ms(fig, gpus)
            except (KeyError, ValueError, UserError) as exc:
                row.skipped = f"cannot predict: {type(exc).__name__}: {exc}"
            if row.predicted_ms is None and not row.skipped:
                row.skipped = "the time model gave no prediction (no peak for the dtype?)"
        rows.append(row)
    print_rows(rows)
    return 0


def print_rows(rows: list[Row]) -> None:
    head = (f"{'source':42} {'gpu':10} {'kernel':18} {'pass':7} {'b':>3} {'h':>3} {'n':>6} {'d':>4} {'c':1} "
            f"{'backend':9} {'published':>10} {'predicted':>10} {'pred/pub':>8}")
    print(head)
    print("-" * len(head))
    pairs = []
    for r in rows:
        f = r.figure
        lead = (f"{short_source(f):42} {f.get('gpu', ''):10} {f.get('kernel', ''):18} {f.get('pass', ''):7} "
                f"{f.get('batch', ''):>3} {f.get('heads', ''):>3} {f.get('seq_len', ''):>6} {f.get('head_dim', ''):>4} "
                f"{'c' if f.get('causal') else '-':1}")
        if r.skipped:
            print(f"{lead} skipped: {r.skipped}")
            continue
        pair = ta.Pair(f["kernel"], f["pass"], f["seq_len"], r.published_ms, r.predicted_ms)
        pairs.append(pair)
        print(f"{lead} {r.backend:9} {r.published_ms:>8.3f}ms {r.predicted_ms:>8.3f}ms "
              f"{pair.predicted_ms / pair.measured_ms:>7.2f}×")
    print()
    acc = ta.accuracy(pairs, min_measured_ms=0.0)
    print(f"{acc.count} figure(s) compared, {sum(1 for r in rows if r.skipped)} skipped: median |error| "
          f"{ta.fmt_factor(acc.median_factor)}, p90 {ta.fmt_factor(acc.p90_factor)} "
          f"(the measured-run goals: median ≤ {ta.GOAL_MEDIAN_FACTOR:g}×, p90 ≤ {ta.GOAL_P90_FACTOR:g}×)")
    for g in ta.by_group(pairs, key=lambda p: (p.label,), min_measured_ms=0.0):
        print(f"  {g.key[0]:17} {g.count:>3} figure(s): median predicted ÷ published {ta.fmt_ratio(g.median_ratio)}, "
              f"median |error| {ta.fmt_factor(g.median_factor)}, furthest off {ta.fmt_ratio(g.worst_ratio)}")


if __name__ == "__main__":
    sys.exit(main())
