"""The GPU check's point stages, read back from their run folders: scripts/gpu_check.sh's
`sweep`, `train`, `long`, `models` and `seconds` stages (issue 38, item 5).

    python scripts/gpu_check_points.py status RUN [RUN ...]
    python scripts/gpu_check_points.py models RUN [RUN ...] --csv F.csv --points-json F.json [--gpu KEY] [--dry-run]
    python scripts/gpu_check_points.py seconds RUN --wall-s S [--full-points 189]

``status``: how the points ended, and for those that did not end ok the commonest reason, in
one ``HEADLINE:`` line (gpu_check.sh copies it into summary.txt): a stage whose points all
ended ``error`` says why in its own summary line. Exit 1 when a point ended error, crashed,
timeout or oom, or when no point ended ok; ``skipped`` (predicted too large for the device)
is what the sweep is meant to do and fails nothing.

``models``: every ok point measured on the GPU against the GPU memory and time MODELS, through
the code `scripts/gpu_models_vs_measured.py` runs (``profiler/predict/measured_gpu.compare``),
with each point's whole shape (grouped KV heads, precision, optimizer, vocabulary included).
Writes one CSV row per point and the measured figures as an ``attnprof-gpu-measurements`` file
(the format of tests/data/h200-2026-12-04/points.json, every identity field kept), ready to be
committed as the next test data. On the dry run the points were measured on the CPU, so no
ratio is printed: the code runs, and the headline says that nothing was measured on a GPU.

``seconds``: seconds per point of a slice of the README's sweep, and the 189-point sweep at
that pace: an extrapolation, labelled as one.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

FAILED_STATUSES = ("error", "crashed", "timeout", "oom")
REASON_CHARS = 160  # of the commonest reason, in a summary line
README_FULL_POINTS = 189  # `attnprof sweep --max-len 65536`: 7 variants x 3 modes x 9 lengths (256..65536)


def records_of(runs: list[Path]) -> list[dict]:
    from attnprof.profiler.runner.storage import read_records

    return [r for run in runs if (run / "results.jsonl").is_file() for r in read_records(run)]


def short_reason(reason) -> str:
    """A reason's first line, printable and cut: what groups like failures together."""
    from attnprof.profiler.units import printable

    first = str(reason or "").strip().splitlines()[0] if str(reason or "").strip() else "(no reason given)"
    return printable(first)[:REASON_CHARS]


def status_line(records: list[dict]) -> tuple[str, int]:
    """(the headline, the exit code) for the points of one stage."""
    if not records:
        return "no point recorded (the sweep ended before its first point: see the log)", 1
    statuses = Counter(str(r.get("status")) for r in records)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    failed = [r for r in records if r.get("status") in FAILED_STATUSES]
    line = f"{len(records)} points ({counts})"
    if failed:
        (reason, n), = Counter(short_reason(r.get("reason")) for r in failed).most_common(1)
        line += f"; commonest failure ({n} of {len(failed)}): {reason}"
    ok = statuses.get("ok", 0)
    skipped = [r for r in records if r.get("status") == "skipped"]
    if skipped and not failed:
        line += f"; skipped: {short_reason(skipped[0].get('reason'))}"
    return line, 0 if ok and not failed else 1


def point_of(record: dict):
    """The Point a record was measured for (every Shape field the record holds)."""
    from attnprof.profiler.predict.measured_gpu import shape_of_record
    from attnprof.profiler.records import Point

    return Point(str(record["variant"]), str(record["mode"]), str(record["scope"]), shape_of_record(record),
                 bool(record.get("forward_only")))


def measured_of(record: dict, source: str, dry_run: bool = False):
    """The record as measured_gpu reads a measured point; on the dry run the model's side only (a CPU's
    figures are no GPU's: no measured figure, so no ratio)."""
    from attnprof.profiler.predict.measured_gpu import Measured

    if dry_run:
        return Measured(point_of(record), source, "", None, None, None, None, None)
    return Measured(point_of(record), source, str(record.get("gpu_sdpa_backend_measured") or ""),
                    record.get("measured_peak_bytes"), record.get("cuda_reserved_peak_bytes"),
                    record.get("nvml_process_peak_bytes"), record.get("time_fwd_ms"), record.get("time_bwd_ms"))


DRY_RUN_WHAT = ("DRY RUN on a CPU: the 'measured' figures below are the CPU tensor tracker's, not a GPU "
                "allocator's; never commit this file as GPU measurements. ")


def measurements_file(records: list[dict], sources: list[str], environment: dict, dry_run: bool = False) -> dict:
    """The measured figures (never a model's answer) in the format measured_gpu.load_measured reads."""
    from attnprof.profiler.predict.measured_gpu import FORMAT
    from attnprof.profiler.records import IDENTITY_FIELDS, with_identity_defaults

    points = []
    for r, source in zip(records, sources):
        r = with_identity_defaults(r)
        points.append({"source": source, **{f: r.get(f) for f in IDENTITY_FIELDS}, "head_dim": r.get("head_dim"),
                       "measured_sdpa_backend": r.get("gpu_sdpa_backend_measured") or "",
                       "measured_allocated_peak_bytes": r.get("measured_peak_bytes"),
                       "measured_reserved_peak_bytes": r.get("cuda_reserved_peak_bytes"),
                       "measured_context_bytes": None,
                       "measured_nvml_process_peak_bytes": r.get("nvml_process_peak_bytes"),
                       "nvml_baseline_bytes": r.get("nvml_baseline_bytes"),
                       "warmup": r.get("warmup"), "repeats": r.get("repeats"),
                       "time_fwd_ms": r.get("time_fwd_ms"), "time_bwd_ms": r.get("time_bwd_ms"),
                       "time_fwd_samples_ms": r.get("time_fwd_samples_ms"),
                       "time_bwd_samples_ms": r.get("time_bwd_samples_ms")})
    return {"format": FORMAT, "version": 1,
            "what": (DRY_RUN_WHAT if dry_run else "") + "Inputs and MEASURED figures only (never a model's answer) of the ok points of "
                    "scripts/gpu_check.sh's CUDA sweeps. Every identity field of each point is kept (grouped KV "
                    "heads, precision, optimizer, vocabulary): a reader must honour them all.",
            "environment": environment, "points": points}


def table_entry(key: str, device_name: str, dry_run: bool):
    """The GPU table entry to model on: ``key``, else the one named like the device; on the dry
    run's CPU (no entry) h200, the GPU sessions are lent. None: no entry for this GPU."""
    from attnprof.profiler.hardware.gpus import by_device_name, get_gpu

    if key:
        return get_gpu(key)
    return by_device_name(device_name) or (get_gpu("h200") if dry_run else None)


def models(runs: list[Path], csv_path: Path, json_path: Path, gpu_key: str, dry_run: bool) -> int:
    from attnprof.profiler.predict.measured_gpu import RATIOS, compare, ratio_lines

    pairs = [(r, f"gpu_check run {run.name}") for run in runs if (run / "results.jsonl").is_file()
             for r in records_of([run]) if r.get("status") == "ok"]
    measured_on = "cpu" if dry_run else "cuda"
    pairs = [(r, s) for r, s in pairs if str(r.get("device", "")).startswith(measured_on) and r.get("measured_peak_bytes")]
    if not pairs:
        print(f"HEADLINE: no ok {measured_on} point with an allocator figure in {len(runs)} run folder(s)")
        return 1
    device_name = str(pairs[0][0].get("device_name") or "")
    gpu = table_entry(gpu_key, device_name, dry_run)
    if gpu is None:
        print(f"HEADLINE: no GPU table entry is named {device_name!r}: nothing to model (attnprof gpus)")
        return 1
    rows = compare([measured_of(r, s, dry_run) for r, s in pairs], gpu)
    for row, (r, _) in zip(rows, pairs):
        from attnprof.profiler.records import later_label

        row["point"] = f"{row['point']} {later_label(r)}".strip()
    columns = ["point", "source", "sdpa_backend_model", "sdpa_backend_measured", "allocated_model_bytes",
               "allocated_measured_bytes", "allocated_ratio", "reserved_model_bytes", "reserved_measured_bytes",
               "reserved_ratio", "total_model_bytes", "total_measured_bytes", "total_ratio", "time_model_ms",
               "time_measured_ms", "time_ratio"]
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    environment = {"device_name": pairs[0][0].get("device_name", ""), "gpu_table_key": gpu.key,
                   "cudnn": pairs[0][0].get("cudnn_version")}
    doc = measurements_file([r for r, _ in pairs], [s for _, s in pairs], environment, dry_run)
    json_path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    if dry_run:  # CPU figures against an H200 model: ratios that would mean nothing
        print(f"HEADLINE: dry run: {len(rows)} CPU points modelled for {gpu.key} (model code ran); "
              f"no ratio, nothing was measured on a GPU")
        return 0
    print("\n".join(ratio_lines(rows, gpu.key, width=60)))
    parts = []
    for c in RATIOS:
        values = [row[c] for row in rows if row[c] is not None]
        if values:
            parts.append(f"{c.split('_')[0]} median {statistics.median(values):.3f} "
                         f"(min {min(values):.3f}, max {max(values):.3f})")
    print(f"HEADLINE: {len(rows)} GPU points, measured/model on {gpu.key}: " + "; ".join(parts))
    return 0


PHASES = ("start", "predict", "cuda_context", "memory_pass", "timing_pass")  # worker.measure_point's, in order


def phases_text(records: list[dict]) -> str:
    """Where a point's seconds went inside its worker (``point_phases_s``, the median over
    ``records``), and how much of the timing pass its timed samples were (the rest: warm-up,
    the first step's library handles and kernel loading, synchronisation): issue 38 item 4."""
    parts = []
    for name in PHASES:
        values = [r["point_phases_s"][name] for r in records if isinstance(r.get("point_phases_s"), dict)
                  and isinstance(r["point_phases_s"].get(name), (int, float))]
        if values:
            parts.append(f"{name} {statistics.median(values):.2f} s")
    timed = [(sum(r.get("time_fwd_samples_ms") or []) + sum(r.get("time_bwd_samples_ms") or [])) / 1e3
             for r in records if r.get("time_fwd_samples_ms")]
    if timed:
        parts.append(f"of which timed {statistics.median(timed):.2f} s")
    return ", ".join(parts)


def seconds(run: Path, wall_s: float, full_points: int) -> int:
    """Seconds per point of the slice, where they went, and the full sweep at that pace."""
    records = records_of([run])
    if not records:
        print(f"HEADLINE: no point recorded in {wall_s:.0f} s")
        return 1
    inside = [r["point_wall_s"] for r in records if isinstance(r.get("point_wall_s"), (int, float))]
    timed_s = sum(sum(r.get("time_fwd_samples_ms") or []) + sum(r.get("time_bwd_samples_ms") or [])
                  for r in records) / 1e3
    for r in records:
        print(f"{r.get('variant')} {r.get('mode')} n={r.get('seq_len')}: {r.get('status')}, "
              f"{r.get('point_wall_s') if r.get('point_wall_s') is not None else '-'} s in its worker "
              f"({phases_text([r]) or 'no phases'})")
    per_point = wall_s / len(records)
    statuses = Counter(str(r.get("status")) for r in records)
    variants = sorted({str(r.get("variant")) for r in records})
    worker = (f"{sum(inside):.1f} s inside workers (median {statistics.median(inside):.2f} s a point)"
              if inside else "no worker time recorded")
    phases = phases_text(records)
    print(f"HEADLINE: {len(records)} points of {', '.join(variants)} "
          f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}) in {wall_s:.1f} s: "
          f"{per_point:.2f} s/point measured (the sweep's start included), {worker}, {timed_s:.2f} s timed passes; "
          f"{'median ' + phases + '; ' if phases else ''}"
          f"{full_points} points at this pace: {per_point * full_points / 60:.1f} min (extrapolated from this slice, "
          f"not measured)")
    return 0 if statuses.get("ok") else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("status")
    s.add_argument("runs", type=Path, nargs="+")
    m = sub.add_parser("models")
    m.add_argument("runs", type=Path, nargs="+")
    m.add_argument("--csv", type=Path, required=True)
    m.add_argument("--points-json", type=Path, required=True)
    m.add_argument("--gpu", default="", help="GPU table key (default: the one named like the device)")
    m.add_argument("--dry-run", action="store_true")
    t = sub.add_parser("seconds")
    t.add_argument("run", type=Path)
    t.add_argument("--wall-s", type=float, required=True)
    t.add_argument("--full-points", type=int, default=README_FULL_POINTS)
    args = parser.parse_args()
    if args.what == "status":
        line, code = status_line(records_of(args.runs))
        print(f"HEADLINE: {line}")
        return code
    if args.what == "models":
        return models(args.runs, args.csv, args.points_json, args.gpu, args.dry_run)
    return seconds(args.run, args.wall_s, args.full_points)


if __name__ == "__main__":
    sys.exit(main())
