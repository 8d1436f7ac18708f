"""Load a run folder for a report: validate it, and add the derived columns charts and
tables share (``series``, ``family``, ``panel``, ``peak_bytes``, ``time_ms``)."""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import pandas as pd

from attnprof.errors import UserError
from attnprof.profiler.gate.checks import record_problem
from attnprof.profiler.records import IDENTITY_FIELDS, PointRecord, step_time_ms, variant_family
from attnprof.profiler.runner.storage import MANIFEST_FILE, RESULTS_FILE, load_run, read_records

# Panels in reading order: the three stack modes, then the attention core alone.
PANEL_ORDER = ("plain", "checkpoint", "reversible", "attention")
# Identity fields besides variant, mode, scope and length; a run that varies one of them
# gets it appended to the series label, so lines never silently merge.
SHAPE_FIELDS = ("d_model", "heads", "layers", "dtype", "ff_mult", "ff_chunks", "forward_only")
REQUIRED = ("variant", "mode", "scope", "seq_len", "status")
# Every field the report reads, type-checked before pandas sees it (checks.record_problem).
READ_FIELDS = IDENTITY_FIELDS + ("status", "reason", "device_name", "predicted_peak_bytes", "measured_peak_bytes",
                                 "time_fwd_ms", "time_bwd_ms")
# What reading hostile JSON can raise besides OSError: bad text or syntax (ValueError),
# nesting too deep (RecursionError), absurd sizes.
_UNREADABLE = (ValueError, RecursionError, MemoryError, TypeError)


class ReportError(UserError):
    """A run folder (or baseline) that cannot be reported on; the message is one line."""


@dataclass
class Run:
    path: Path
    frame: pd.DataFrame  # one row per point, derived columns added
    manifest: dict


def one_line(text) -> str:
    return " ".join(str(text).split())


def load(run_dir, role: str = "run") -> Run:
    """The run at ``run_dir``, or ReportError saying in one line what is wrong with it."""
    path = Path(run_dir)
    if not path.exists():
        raise ReportError(f"{role} folder not found: {path}")
    if not path.is_dir():
        raise ReportError(f"{role} {path} is not a folder")
    if not (path / RESULTS_FILE).is_file():
        raise ReportError(f"{role} folder {path} has no {RESULTS_FILE} (is it a run folder?)")
    try:
        records = read_records(path)
    except (OSError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{role} {path}: cannot read {RESULTS_FILE}: {type(exc).__name__}: {exc}")) from None
    if not records:
        raise ReportError(f"{role} {path}: {RESULTS_FILE} holds no valid record" if _has_content(path / RESULTS_FILE)
                          else f"{role} {path} has no results yet ({RESULTS_FILE} is empty)")
    check_records(records, f"{role} {path}: {RESULTS_FILE}")
    manifest = _manifest(path)
    try:
        return Run(path, tidy(load_run(path)), manifest)
    except (OSError, KeyError, OverflowError, *_UNREADABLE) as exc:  # e.g. a line appended since the check
        raise ReportError(one_line(f"{role} {path}: cannot use {RESULTS_FILE}: {type(exc).__name__}: {exc}")) from None


def _has_content(file: Path) -> bool:
    try:
        with open(file, "rb") as fh:
            return bool(fh.read(1 << 16).strip())
    except OSError:
        return False


def check_records(records: list, where: str) -> None:
    """Every record an object with the fields the report needs, of the types it needs."""
    if not all(isinstance(r, dict) for r in records):
        raise ReportError(f"{where} holds lines that are not records")
    absent = [c for c in REQUIRED if any(c not in r for r in records)]
    if absent:
        raise ReportError(f"{where} lacks field(s) {', '.join(absent)}")
    for i, record in enumerate(records, 1):
        problem = record_problem(record, READ_FIELDS)
        if problem:
            raise ReportError(one_line(f"{where}: record {i} ({str(record.get('variant'))[:60]!r}) {problem}"))


def _manifest(path: Path) -> dict:
    file = path / MANIFEST_FILE
    if not file.exists():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{file} is not valid JSON: {type(exc).__name__}: {exc}")) from None
    return data if isinstance(data, dict) else {"manifest": data}


# Identity fields older records may lack, with the value they had before they existed.
_DEFAULTS = {f.name: f.default for f in fields(PointRecord) if f.name in IDENTITY_FIELDS and f.default is not MISSING}


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for col, default in _DEFAULTS.items():
        frame[col] = frame[col].where(frame[col].notna(), default) if col in frame else default
    for col in ("predicted_peak_bytes", "measured_peak_bytes", "time_fwd_ms", "time_bwd_ms"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce") if col in frame else float("nan")
    frame["variant"] = frame["variant"].astype(str)
    frame["reason"] = frame["reason"].fillna("").astype(str) if "reason" in frame else ""
    frame["seq_len"] = frame["seq_len"].astype(int)
    frame["family"] = frame["variant"].map(variant_family)
    frame["series"] = _series(frame)
    frame["panel"] = [("attention" if s == "attention" else str(m)) for s, m in zip(frame["scope"], frame["mode"])]
    frame["peak_measured"] = frame["measured_peak_bytes"].notna()
    frame["peak_bytes"] = frame["measured_peak_bytes"].where(frame["peak_measured"], frame["predicted_peak_bytes"])
    frame["time_ms"] = step_time_ms(frame["time_fwd_ms"], frame["time_bwd_ms"])
    return frame


def _series(frame: pd.DataFrame) -> pd.Series:
    varying = [f for f in SHAPE_FIELDS if f in frame and frame[f].nunique(dropna=False) > 1]
    # batch too, where two points differ only in it (not where tokens per batch is held fixed)
    if "batch" in frame and frame.duplicated(["variant", "mode", "scope", "seq_len", *varying]).any():
        varying.append("batch")
    if not varying:
        return frame["variant"].copy()
    return frame.apply(lambda r: f"{r['variant']} ({', '.join(f'{f}={r[f]}' for f in varying)})", axis=1)


def panels(frame: pd.DataFrame) -> list[str]:
    present = set(frame["panel"])
    return [p for p in PANEL_ORDER if p in present] + sorted(present - set(PANEL_ORDER))


def series_order(frame: pd.DataFrame) -> list[str]:
    """Series in first-seen order of their families, configurations of a family together."""
    fams = list(dict.fromkeys(frame["family"]))
    out = []
    for fam in fams:
        out += sorted(set(frame.loc[frame["family"] == fam, "series"]), key=lambda s: (len(s), s))
    return out
