"""Printing the time model's figures: a table of predicted step times and ``--sort time``'s
ranking. Every heading says which device the times are for and that they are a model."""

from __future__ import annotations

from typing import Optional

from attnprof.profiler.hardware.checked import summary_lines
from attnprof.profiler.records import step_time_ms
from attnprof.profiler.units import fmt_bytes, fmt_ms, printable, text_table

CPU_LABEL = "step-time MODEL on this machine's CPU (roofline per op from `attnprof calibrate`'s measurements)"
GPU_LABEL = "step-time MODEL on {gpu} (roofline per op, datasheet peaks x published efficiencies)"


def _tokens(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def time_of(record: dict, gpu: bool) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """(fwd, bwd, step) ms of a record on the CPU model or, with ``gpu``, its GPU's."""
    prefix = "gpu_time" if gpu else "predicted_time"
    fwd, bwd = record.get(f"{prefix}_fwd_ms"), record.get(f"{prefix}_bwd_ms")
    return fwd, bwd, step_time_ms(fwd, bwd)


def format_time_table(records: list[dict]) -> str:
    """One line per point: the CPU model's forward, backward and step time, tokens per second."""
    head = ["variant", "mode", "seq_len", "batch", "fwd", "bwd", "step", "tokens/s"]
    rows = []
    for r in records:
        fwd, bwd, step = time_of(r, gpu=False)
        tps = r["batch"] * r["seq_len"] / (step / 1e3) if step else None
        rows.append([str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]), fmt_ms(fwd, "-"),
                     fmt_ms(bwd, "-"), fmt_ms(step, "-"), _tokens(tps)])
    return "\n".join([CPU_LABEL, *text_table(head, rows)])


def rank(records: list[dict], *, gpu: bool, memory_limit_bytes: Optional[int] = None) -> tuple[list, list]:
    """(records that fit, fastest first; [(record, why it is left out)]). On a GPU a record
    fits when the GPU memory model says so; on the CPU, when its predicted peak is within
    ``memory_limit_bytes``. A record without a predicted time is left out, with the reason."""
    fitting, left = [], []
    for r in records:
        if r.get("status", "ok") != "ok":
            left.append((r, r.get("reason") or r.get("status")))
        elif gpu and not r.get("gpu_fits"):
            left.append((r, f"does not fit {r.get('gpu')} (model: {fmt_bytes(r.get('gpu_total_bytes'))})"))
        elif not gpu and memory_limit_bytes is not None and (r.get("predicted_peak_bytes") or 0) > memory_limit_bytes:
            left.append((r, f"predicted peak {fmt_bytes(r.get('predicted_peak_bytes'))} is over this machine's "
                            f"{fmt_bytes(memory_limit_bytes)}"))
        elif time_of(r, gpu)[2] is None:
            left.append((r, "no predicted time (see the warning above)"))
        else:
            fitting.append(r)
    fitting.sort(key=lambda r: (time_of(r, gpu)[2], str(r["variant"]), str(r["mode"])))
    return fitting, left


def format_ranking(records: list[dict], *, gpus: list, memory_limit_bytes: Optional[int] = None) -> str:
    """``attnprof predict --sort time``: per device (the CPU model, or each --gpu), the
    points that fit, fastest first, then the ones left out and why."""
    lines: list[str] = []
    for gpu in gpus or [None]:
        mine = [r for r in records if gpu is None or r.get("gpu") == gpu]
        fitting, left = rank(mine, gpu=gpu is not None, memory_limit_bytes=memory_limit_bytes)
        where = GPU_LABEL.format(gpu=printable(gpu)) if gpu else CPU_LABEL
        head = ["rank", "variant", "mode", "seq_len", "batch", "step", "fwd", "bwd", "tokens/s",
                "total" if gpu else "peak"]
        rows = []
        for i, r in enumerate(fitting, 1):
            fwd, bwd, step = time_of(r, gpu is not None)
            tps = r["batch"] * r["seq_len"] / (step / 1e3) if step else None
            memory = r.get("gpu_total_bytes") if gpu else r.get("predicted_peak_bytes")
            rows.append([str(i), str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]),
                         fmt_ms(step, "-"), fmt_ms(fwd, "-"), fmt_ms(bwd, "-"), _tokens(tps), fmt_bytes(memory)])
        lines += [f"ranked by predicted step time (fwd + bwd), fastest first, among those that fit: {where}",
                  *text_table(head, rows)]
        lines += [printable(f"left out: {r['variant']} {r['mode']} n={r['seq_len']}: {why}") for r, why in left]
        lines += summary_lines(fitting) if gpu else []
        lines.append("")
    return "\n".join(lines).rstrip()


def format_calibration(cal, cached: bool, path) -> str:
    """``attnprof calibrate``: what was measured (or read back), one figure per line."""
    where = f": {path}" if path is not None else ", not cached"  # never a file that was not written
    lines = [f"this machine: {cal.cpu} on {cal.host}, torch {cal.torch_version}, {cal.threads} threads"
             f" ({'read from the cache' if cached else f'measured in {cal.wall_s:.1f} s'}{where})",
             f"  memory bandwidth   {cal.bandwidth_bytes_per_s / 1e9:8.1f} GB/s (read + written, large copy)",
             f"  per-op overhead    {cal.overhead_fwd_s * 1e6:8.2f} us forward, {cal.overhead_bwd_s * 1e6:.2f} us backward"]
    for dtype, rate in cal.gemm_flops_per_s.items():
        fwd, bwd = cal.attention_fwd_flops_per_s.get(dtype), cal.attention_bwd_flops_per_s.get(dtype)
        att = (f", attention {fwd / 1e9:.1f} fwd / {bwd / 1e9:.1f} bwd GFLOP/s" if fwd and bwd else "")
        lines.append(f"  {dtype:<18} {rate / 1e9:8.1f} GFLOP/s GEMM{att}")
        thin = (cal.gemm_k_flops_per_s or {}).get(dtype)
        if thin:
            lines.append(f"  {'':<18} thin GEMM by K: " + ", ".join(f"K {k} {v / 1e9:.0f}" for k, v in thin.items())
                         + " GFLOP/s")
    for cls, rate in (cal.class_bytes_per_s or {}).items():
        lines.append(f"  {cls:<18} {rate / 1e9:8.1f} GB/s (median of its kernels)")
    if cal.kernel_bytes_per_s:
        lines.append("  kernels            " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in cal.kernel_bytes_per_s.items())
                     + " GB/s")
    if cal.fresh_page_bytes_per_s:
        lines.append(f"  fresh pages        {cal.fresh_page_bytes_per_s / 1e9:8.1f} GB/s (first write of an output >= 32 MiB)")
    lines += [f"  note: {n}" for n in cal.notes]
    return "\n".join(printable(line) for line in lines)  # names and notes from a cache file: spelled out
