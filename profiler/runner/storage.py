"""Run-folder I/O: append records as points finish, read them back, load a DataFrame.

A run folder holds ``results.jsonl`` (one record per line, appended and flushed as each
point finishes) and ``manifest.json`` (configuration and environment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from attnprof.profiler.records import PointRecord, key_of_record

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


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
