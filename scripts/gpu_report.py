#!/usr/bin/env python3
"""Turn what scripts/gpu_check.sh sent back into docs/measured-gpu.md, on a CPU machine.

    python scripts/gpu_report.py FOLDER [--doc docs/measured-gpu.md] [--prefix call2-]

FOLDER is the check's $OUT as it came back (the device tool's files_at): summary.txt,
comparison.csv, gpu-model.csv, time-comparison.csv, models-vs-measured.csv and gpu-check.tgz
(with --prefix P: Psummary.txt and so on, several calls' files kept in one folder). The folder is data
from another machine: nothing in it is executed, the tarball is never extracted (its
environment.json is read in memory, size-bounded), and the CSV cells are escaped for
Markdown. The page names the device, the versions and the date of the run.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import tarfile
from pathlib import Path

MAX_BYTES = 4 << 20  # any one file we read; the check's are a few KiB
TABLES = [  # (file, title, columns)
    ("comparison.csv", "Predicted vs allocator vs NVML (the check's sweep)",
     ["variant", "mode", "seq_len", "status", "predicted_peak_bytes", "measured_peak_bytes", "measured_over_predicted",
      "cuda_reserved_peak_bytes", "nvml_process_peak_bytes", "gpu_sdpa_backend_measured", "time_fwd_ms", "time_bwd_ms"]),
    ("gpu-model.csv", "The GPU memory model vs measured (each point in a fresh process)",
     ["variant", "scope", "mode", "dtype", "seq_len", "model_sdpa_backend", "measured_sdpa_backend",
      "model_allocated_bytes", "measured_allocated_bytes", "allocated_measured_over_model", "model_reserved_bytes",
      "measured_reserved_bytes", "reserved_measured_over_model", "total_measured_over_model", "error"]),
    ("time-comparison.csv", "Step time: the model vs measured",
     ["variant", "mode", "seq_len", "measured_ms", "predicted_ms", "predicted_over_measured"]),
    ("models-vs-measured.csv", "The GPU memory and time MODELS vs every ok GPU point of the check (measured / model)",
     ["point", "sdpa_backend_model", "sdpa_backend_measured", "allocated_model_bytes", "allocated_measured_bytes",
      "allocated_ratio", "reserved_model_bytes", "reserved_measured_bytes", "reserved_ratio", "total_model_bytes",
      "total_measured_bytes", "total_ratio", "time_model_ms", "time_measured_ms", "time_ratio"]),
]


class ReportError(Exception):
    pass


def cell(value) -> str:
    """A value for a Markdown table cell: one line, no pipes, no markup."""
    text = "" if value is None else str(value)
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    for ch in "\\|*_`[]<>#":
        text = text.replace(ch, "\\" + ch)
    return text[:120]


def read_small(path: Path) -> str:
    if path.is_symlink() or not path.is_file():
        raise ReportError(f"{path} is not a regular file")
    if path.stat().st_size > MAX_BYTES:
        raise ReportError(f"{path} is larger than {MAX_BYTES >> 20} MiB")
    return path.read_text(encoding="utf-8", errors="replace")


def environment(folder: Path, prefix: str = "") -> dict:
    """environment.json from the tarball, read in memory; {} when missing or unreadable."""
    tgz = folder / f"{prefix}gpu-check.tgz"
    try:
        if tgz.is_symlink() or not tgz.is_file() or tgz.stat().st_size > 64 * MAX_BYTES:
            return {}
        with tarfile.open(tgz, "r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.lstrip("./") == "environment.json" and member.size <= MAX_BYTES:
                    data = json.loads(tar.extractfile(member).read().decode("utf-8", "replace"))
                    return data if isinstance(data, dict) else {}
    except (OSError, tarfile.TarError, ValueError, RecursionError):
        return {}
    return {}


def render(folder: Path, prefix: str = "") -> str:
    """The page; ``prefix``: the files are named PREFIXsummary.txt etc. (one folder holding several calls'
    files, e.g. call1-, call2- in ../shared/gpu-runs/h200-2026-12-04/)."""
    summary = read_small(folder / f"{prefix}summary.txt").splitlines()
    env = environment(folder, prefix)
    device = env.get("device_name") or "unknown device"
    lines = [f"# Measured on a GPU: {cell(device)}", "",
             "Written by `scripts/gpu_report.py` from what `scripts/gpu_check.sh` sent back. "
             f"torch {cell(env.get('torch'))}, CUDA {cell(env.get('cuda'))}, cuDNN {cell(env.get('cudnn'))}, "
             f"driver {cell(env.get('driver'))}, Python {cell(env.get('python'))}; "
             f"{cell(env.get('device_memory_bytes'))} B of device memory, compute capability "
             f"{cell(env.get('compute_capability'))}. Bytes and milliseconds throughout; ratios as named.", "",
             "## Stages", "", "```", *[line[:300] for line in summary], "```", ""]
    backends = env.get("sdpa_backends")
    if isinstance(backends, dict) and backends:
        lines += ["## SDPA backend for the check's shapes", "", "| shape | torch ran | the model picks |", "|---|---|---|"]
        lines += [f"| {cell(k)} | {cell(v.get('torch') if isinstance(v, dict) else v)} "
                  f"| {cell(v.get('model') if isinstance(v, dict) else '')} |" for k, v in backends.items()]
        lines.append("")
    for name, title, columns in TABLES:
        path = folder / f"{prefix}{name}"
        if not path.exists():
            lines += [f"## {title}", "", f"(no {name}: the stage did not finish)", ""]
            continue
        rows = list(csv.DictReader(io.StringIO(read_small(path))))
        lines += [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--doc", type=Path, default=Path("docs/measured-gpu.md"))
    parser.add_argument("--prefix", default="", help="the files' common prefix, e.g. call2- (default: none)")
    args = parser.parse_args()
    if any(ch in args.prefix for ch in "/\\") or args.prefix.startswith("."):
        print(f"gpu_report: --prefix {args.prefix!r} must name files in FOLDER, not a path", file=sys.stderr)
        return 2
    try:
        text = render(args.folder, args.prefix)
    except ReportError as exc:
        print(f"gpu_report: {exc}", file=sys.stderr)
        return 2
    args.doc.write_text(text, encoding="utf-8")
    print(f"gpu_report: wrote {args.doc} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
