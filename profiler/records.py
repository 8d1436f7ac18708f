"""One flat record per profiled point (units in the field names), and run-folder I/O.

A run folder holds ``results.jsonl`` (one record per line, appended and flushed as each
point finishes) and ``manifest.json`` (configuration and environment).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

STATUSES = ("ok", "oom", "timeout", "crashed", "skipped", "error")
RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass
class PointRecord:
    # --- identity (Point.identity()) ---
    variant: str  # label, options included: "lsh[n_hashes=8]"
    mode: str  # plain | checkpoint | reversible | none (scope attention)
    scope: str  # model | attention
    seq_len: int
    batch: int
    d_model: int
    heads: int
    head_dim: int
    layers: int
    dtype: str
    ff_mult: int = 4
    ff_chunks: int = 1
    forward_only: bool = False
    # --- outcome ---
    status: str = "ok"  # one of STATUSES
    reason: str = ""  # why, for every status but ok (and notes for ok)
    device: str = "cpu"  # cpu | cuda
    device_name: str = ""
    # --- prediction (fake tensors, CPU device) ---
    predicted_peak_bytes: Optional[int] = None
    predicted_breakdown_bytes: dict = field(default_factory=dict)  # category -> bytes at the peak
    flops_fwd: Optional[int] = None
    flops_bwd: Optional[int] = None
    # --- memory pass ---
    measured_peak_bytes: Optional[int] = None  # CPU: exact tensor peak; GPU: allocator max allocated
    measured_by: str = ""  # "tensor-tracker" | "cuda-allocator"
    cuda_reserved_peak_bytes: Optional[int] = None
    nvml_device_peak_bytes: Optional[int] = None  # device-wide, sampled, minus nothing
    nvml_process_peak_bytes: Optional[int] = None  # this process, where NVML can tell
    nvml_baseline_bytes: Optional[int] = None  # CUDA context + torch before the point
    nvml_note: str = ""
    rss_peak_bytes: Optional[int] = None  # sampled resident set size during the memory pass
    rss_baseline_bytes: Optional[int] = None  # RSS just before the memory pass
    # --- timing pass ---
    warmup: int = 0
    repeats: int = 0
    time_fwd_samples_ms: list = field(default_factory=list)
    time_bwd_samples_ms: list = field(default_factory=list)
    time_fwd_ms: Optional[float] = None  # median
    time_bwd_ms: Optional[float] = None  # median
    time_fwd_iqr_ms: Optional[float] = None
    time_bwd_iqr_ms: Optional[float] = None
    tokens_per_s: Optional[float] = None  # batch*seq_len / median(fwd+bwd)
    achieved_flops_per_s: Optional[float] = None  # predicted FLOPs / median(fwd+bwd)
    # --- bookkeeping ---
    point_wall_s: Optional[float] = None  # wall time of the whole point in its worker
    finished_at: str = ""  # ISO time

    @classmethod
    def from_dict(cls, data: dict) -> "PointRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_row(self) -> dict:
        return asdict(self)

    @property
    def time_ms(self) -> Optional[float]:
        if self.time_fwd_ms is None:
            return None
        return self.time_fwd_ms + (self.time_bwd_ms or 0.0)


def append_record(run_dir: Path, record: PointRecord) -> None:
    """Append one record and flush it to disk before returning: a crash loses nothing."""
    path = Path(run_dir) / RESULTS_FILE
    line = json.dumps(record.to_row(), sort_keys=False)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_records(run_dir: Path) -> list[dict]:
    """Every complete record of a run (a torn last line from a kill is ignored)."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def load_run(run_dir: str | Path):
    """A run as a tidy pandas DataFrame, one row per point (the last record wins)."""
    import pandas as pd

    from attnprof.profiler.point import key_of_record

    latest: dict = {}
    for rec in read_records(Path(run_dir)):
        latest[key_of_record(rec)] = rec
    frame = pd.DataFrame(list(latest.values()))
    if not frame.empty:
        frame = frame.sort_values(["scope", "mode", "variant", "seq_len"], kind="stable").reset_index(drop=True)
    return frame


def read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / MANIFEST_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
