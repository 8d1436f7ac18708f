"""The GPU memory model's tables (``attnprof predict --gpu``): one line per point x GPU,
or per series x GPU for a budget search; every figure labelled a model, and below it how
close the model came on a real GPU for such points (``gpu_checked``: hardware/checked.py)."""

from __future__ import annotations

from attnprof.profiler.hardware.checked import summary_lines
from attnprof.profiler.memmodel.gpu_peak import MODEL_LABEL
from attnprof.profiler.units import printable, text_table


def format_gpu_table(records: list[dict]) -> str:
    """The model's figures, one line per point x GPU, never beside a measured column."""
    from attnprof.profiler.units import fmt_bytes

    head = ["variant", "mode", "seq_len", "batch", "gpu", "sdpa", "tensors", "allocated", "reserved", "total", "fits",
            "fwd", "bwd", "tokens/s"]
    rows = []
    for r in records:
        if r.get("gpu_total_bytes") is None:
            rows.append([str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]), str(r["gpu"])]
                        + ["-"] * 9)
            continue
        rows.append([str(r["variant"]), str(r["mode"]), str(r["seq_len"]), str(r["batch"]), r["gpu"],
                     r["gpu_sdpa_backend"] or "-", fmt_bytes(r["gpu_tensor_peak_bytes"]),
                     fmt_bytes(r["gpu_allocated_peak_bytes"]), fmt_bytes(r["gpu_reserved_peak_bytes"]),
                     fmt_bytes(r["gpu_total_bytes"]), "yes" if r["gpu_fits"] else "NO",
                     *_time_cells(r)])
    notes = dict.fromkeys(f"{r['gpu']}: {r['gpu_note']}" for r in records if r.get("gpu_note"))
    return "\n".join([MODEL_LABEL + "; total = CUDA context + reserved (what NVML would show); " + TIME_LABEL,
                      *text_table(head, rows), *(printable(f"model note: {n}") for n in notes),
                      *summary_lines(records)])


TIME_LABEL = "fwd/bwd/tokens/s: step-time MODEL (roofline per op, profiler/timemodel)"


def _time_cells(r: dict) -> list[str]:
    from attnprof.profiler.units import fmt_ms

    tps = r.get("gpu_tokens_per_s")
    return [fmt_ms(r.get("gpu_time_fwd_ms"), "-"), fmt_ms(r.get("gpu_time_bwd_ms"), "-"),
            f"{tps:,.0f}" if tps is not None else "-"]


def format_gpu_budget_table(rows: list[dict]) -> str:
    from attnprof.profiler.units import fmt_bytes

    from attnprof.profiler.records import step_time_ms
    from attnprof.profiler.units import fmt_ms

    head = ["variant", "mode", "gpu", "limit", "longest_fit", "total_there", "step_there", "sdpa", "limited_by"]
    lines = [[str(r["variant"]), str(r["mode"]), r["gpu"], fmt_bytes(r["limit_bytes"]),
              str(r["longest_fitting_seq_len"] or "none"), fmt_bytes(r.get("gpu_total_bytes")),
              fmt_ms(step_time_ms(r.get("gpu_time_fwd_ms"), r.get("gpu_time_bwd_ms")), "-"),
              r.get("gpu_sdpa_backend") or "-", r["limited_by"]] for r in rows]
    return "\n".join([f"longest power-of-two length whose modelled GPU total fits ({MODEL_LABEL}); "
                      f"step_there: fwd + bwd there, {TIME_LABEL}", *text_table(head, lines), *summary_lines(rows)])
