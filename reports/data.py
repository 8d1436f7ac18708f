"""Load a run folder for a report: validate it, and add the derived columns charts and
tables share (``series``, ``family``, ``panel``, ``device_label``, ``peak_bytes``, ``time_ms``).

A ``sweep --gpu-types`` folder (``OUT/gpu-types.json``, no results of its own) loads as one
run: the per-type run folders it lists, side by side. Whenever the rows name more than one
device, the device is part of each series, so lines of different devices never merge."""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import pandas as pd

from attnprof.errors import UserError
from attnprof.profiler.gate.checks import record_problem
from attnprof.profiler.records import IDENTITY_FIELDS, PointRecord, step_time_ms, variant_family
from attnprof.profiler import safeio
from attnprof.profiler.runner.storage import MANIFEST_FILE, MAX_MANIFEST_BYTES, RESULTS_FILE, load_run, read_records_checked

# Panels in reading order: the three stack modes, then the attention core alone.
PANEL_ORDER = ("plain", "checkpoint", "reversible", "attention")
# Identity fields besides variant, mode, scope and length; a run that varies one of them
# gets it appended to the series label, so lines never silently merge.
SHAPE_FIELDS = tuple(f for f in IDENTITY_FIELDS if f not in ("variant", "mode", "scope", "seq_len", "batch"))
REQUIRED = ("variant", "mode", "scope", "seq_len", "status")
# Every field the report reads, type-checked before pandas sees it (checks.record_problem).
READ_FIELDS = IDENTITY_FIELDS + ("status", "reason", "device_name", "predicted_peak_bytes", "measured_peak_bytes",
                                 "time_fwd_ms", "time_bwd_ms")
# What reading hostile JSON can raise besides OSError: bad text or syntax (ValueError),
# nesting too deep (RecursionError), absurd sizes.
_UNREADABLE = (ValueError, RecursionError, MemoryError, TypeError)
# The index ``attnprof sweep --gpu-types`` writes (profiler/runner/gpu_types.py GPU_TYPES_FILE;
# reports never import runner.sweep): {"gpu_types": {TYPE: FOLDER NAME}, "gpus": {TYPE: count}}.
GPU_TYPES_FILE = "gpu-types.json"
MAX_INDEX_BYTES = 1 << 20
MAX_GPU_TYPES = 256


class ReportError(UserError):
    """A run folder (or baseline) that cannot be reported on; the message is one line."""


@dataclass
class Run:
    path: Path
    frame: pd.DataFrame  # one row per point, derived columns added
    manifest: dict
    parts: dict = field(default_factory=dict)  # a --gpu-types folder: GPU type -> its run folder
    missing: dict = field(default_factory=dict)  # GPU type -> why its folder is left out
    skipped: list = field(default_factory=list)  # Skipped: invalid lines of results.jsonl, left out


@dataclass(frozen=True)
class Skipped:
    """The invalid lines of one results file: rendered around, and said so (``skipped_note``)."""

    file: Path
    problems: tuple  # storage.Problem (line number, reason)


def skipped_note(skipped: list, role: str = "run") -> str:
    """'skipped 2 invalid record(s) of the run: RUN/results.jsonl line 3, 7 (line 3: ...)' in one line."""
    total = sum(len(s.problems) for s in skipped)
    where = "; ".join(f"{s.file} line {', '.join(str(p.line) for p in s.problems[:10])}"
                      + (f" and {len(s.problems) - 10} more" if len(s.problems) > 10 else "") for s in skipped)
    first = skipped[0].problems[0]
    return one_line(f"skipped {total} invalid record(s) of the {role}: {where} (first, {first}); "
                    f"the report shows the valid ones")


def one_line(text) -> str:
    return " ".join(str(text).split())


def load(run_dir, role: str = "run") -> Run:
    """The run at ``run_dir``, or ReportError saying in one line what is wrong with it."""
    path = Path(run_dir)
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:  # a name too long for the file system
        raise ReportError(one_line(f"{role} folder {str(path)[:120]}: {exc.strerror or exc}")) from None
    if not exists:
        raise ReportError(f"{role} folder not found: {path}")
    if not is_dir:
        raise ReportError(f"{role} {path} is not a folder")
    if not os.path.lexists(path / RESULTS_FILE) and os.path.lexists(path / GPU_TYPES_FILE):
        return load_gpu_types(path, role)
    frame, manifest, skipped = _read(path, role)
    try:
        return Run(path, tidy(frame), manifest, skipped=skipped)
    except (OSError, KeyError, OverflowError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{role} {path}: cannot use {RESULTS_FILE}: {type(exc).__name__}: {exc}")) from None


def _read(path: Path, role: str) -> tuple[pd.DataFrame, dict, list]:
    """One run folder's rows (before ``tidy``), manifest and skipped lines, validated."""
    if not os.path.lexists(path / RESULTS_FILE):  # a link or a FIFO there is refused by the read, not missed
        raise ReportError(f"{role} folder {path} has no {RESULTS_FILE} (is it a run folder?)")
    try:
        records, problems = read_records_checked(path)
    except safeio.LinkRefused:
        raise
    except (OSError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{role} {path}: cannot read {RESULTS_FILE}: {type(exc).__name__}: {exc}")) from None
    if problems and problems[0].line == 0:  # the file as a whole: not readable
        raise ReportError(one_line(f"{role} {path}: {problems[0]}"))
    skipped = [Skipped(path / RESULTS_FILE, tuple(problems))] if problems else []
    if not records:
        raise ReportError(f"{role} {path}: {RESULTS_FILE} holds no valid record" if _has_content(path / RESULTS_FILE)
                          else f"{role} {path} has no results yet ({RESULTS_FILE} is empty)")
    check_records(records, f"{role} {path}: {RESULTS_FILE}")
    manifest = _manifest(path)
    try:
        return load_run(path), manifest, skipped
    except (OSError, KeyError, OverflowError, *_UNREADABLE) as exc:  # e.g. a line appended since the check
        raise ReportError(one_line(f"{role} {path}: cannot use {RESULTS_FILE}: {type(exc).__name__}: {exc}")) from None


def load_gpu_types(path: Path, role: str = "run") -> Run:
    """A ``sweep --gpu-types`` folder as one run: the rows of every per-type folder its
    index lists (a type not run yet is left out and named), each row's ``device_label``
    its device name (its GPU type where the records name none)."""
    folders = gpu_type_folders(path)
    frames, manifests, missing, skipped = [], {}, {}, []
    for gpu_type, folder in folders.items():
        if not (folder / RESULTS_FILE).is_file() or not _has_content(folder / RESULTS_FILE):
            missing[gpu_type] = f"{folder.name}: no results yet"
            continue
        frame, manifest, skipped_here = _read(folder, f"{role} {gpu_type}")
        skipped += skipped_here
        names = frame["device_name"] if "device_name" in frame else pd.Series("", index=frame.index)
        frame["device_label"] = [n if isinstance(n, str) and n.strip() else gpu_type for n in names]
        frame["gpu_type"] = gpu_type
        frames.append(frame)
        manifests[gpu_type] = {"folder": folder.name, **manifest}
    if not frames:
        raise ReportError(one_line(f"{role} {path}: none of the run folders {GPU_TYPES_FILE} lists has results yet "
                                   f"({', '.join(missing.values())[:300]})"))
    _distinct_labels(frames)
    scenarios = [m.get("scenario") for m in manifests.values()]
    manifest = {"scenario": scenarios[0]} if isinstance(scenarios[0], dict) and all(
        s == scenarios[0] for s in scenarios) else {}
    manifest["gpu_types"] = manifests
    try:
        frame = tidy(pd.concat(frames, ignore_index=True, sort=False))
    except (OSError, KeyError, OverflowError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{role} {path}: cannot combine its run folders: {type(exc).__name__}: {exc}")) from None
    parts = {t: folders[t] for t in manifests}
    return Run(path, frame, manifest, parts=parts, missing=missing, skipped=skipped)


def _distinct_labels(frames: list) -> None:
    """Two GPU types whose records name the same device stay apart: 'NAME [TYPE]'."""
    owners: dict = {}
    for frame in frames:
        for label in set(frame["device_label"]):
            owners.setdefault(label, set()).add(frame["gpu_type"].iloc[0])
    for frame in frames:
        gpu_type = frame["gpu_type"].iloc[0]
        frame["device_label"] = [f"{x} [{gpu_type}]" if len(owners[x]) > 1 else x for x in frame["device_label"]]


def gpu_type_folders(path: Path) -> dict:
    """GPU type -> run folder, from ``path/gpu-types.json``; ReportError in one line for an
    index that is not the one a sweep writes, or names a folder that is not a subfolder of
    ``path`` (an absolute path, '..', a separator, a link leading out)."""
    index = path / GPU_TYPES_FILE
    try:
        raw = safeio.read_bounded(index, MAX_INDEX_BYTES)  # never through a link, never blocking on a FIFO
    except safeio.LinkRefused:
        raise ReportError(f"{index} is a link or not a regular file; a run folder is data: refused") from None
    except ValueError:
        raise ReportError(f"{index} is too large to be a GPU-type index") from None
    except OSError as exc:
        raise ReportError(one_line(f"cannot read {index}: {exc.strerror or exc}")) from None
    try:
        if raw is None:
            raise FileNotFoundError(f"{index} does not exist")
        data = json.loads(raw.decode("utf-8"))
    except (OSError, *_UNREADABLE) as exc:
        raise ReportError(one_line(f"{index} is not valid JSON: {type(exc).__name__}: {exc}")) from None
    types = data.get("gpu_types") if isinstance(data, dict) else None
    if not isinstance(types, dict) or not types:
        raise ReportError(f'{index} lists no GPU types (expected {{"gpu_types": {{"TYPE": "FOLDER"}}, ...}})')
    if len(types) > MAX_GPU_TYPES:
        raise ReportError(f"{index} lists {len(types)} GPU types, more than {MAX_GPU_TYPES}")
    root = path.resolve()
    folders = {}
    for gpu_type, name in types.items():
        what = f"{index}: GPU type {str(gpu_type)[:60]!r}"
        if not isinstance(name, str) or not _plain_name(name):
            raise ReportError(one_line(f"{what} names folder {str(name)[:80]!r}, not a folder inside {path}; "
                                       f"refused"))
        folder = path / name
        try:
            inside = folder.resolve().parent == root
        except (OSError, RuntimeError, ValueError):
            inside = False
        if not inside:
            raise ReportError(one_line(f"{what}: folder {name[:80]!r} leads outside {path}; refused"))
        folders[str(gpu_type)] = folder
    return folders


def _plain_name(name: str) -> bool:
    """One path component: no separator, not '.' or '..', no NUL, not absolute."""
    return (0 < len(name) <= 255 and name not in (".", "..") and not any(c in name for c in "/\\\0:")
            and not Path(name).is_absolute() and Path(name).name == name)


def multi_device(frame: pd.DataFrame) -> bool:
    return "device_label" in frame and frame["device_label"].nunique() > 1


def devices(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame["device_label"])) if "device_label" in frame else []


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
    try:
        raw = safeio.read_bounded(file, MAX_MANIFEST_BYTES)  # never through a link, never a FIFO
        if raw is None:
            return {}
        data = json.loads(raw.decode("utf-8"))
    except safeio.LinkRefused:
        raise
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
    if "device_label" not in frame:
        names = frame["device_name"] if "device_name" in frame else pd.Series("", index=frame.index)
        frame["device_label"] = [n if isinstance(n, str) and n.strip() else "unknown" for n in names]
    frame["family"] = frame["variant"].map(variant_family)
    frame["series"] = _series(frame)
    frame["panel"] = [("attention" if s == "attention" else str(m)) for s, m in zip(frame["scope"], frame["mode"])]
    frame["peak_measured"] = frame["measured_peak_bytes"].notna()
    frame["peak_bytes"] = frame["measured_peak_bytes"].where(frame["peak_measured"], frame["predicted_peak_bytes"])
    frame["time_ms"] = step_time_ms(frame["time_fwd_ms"], frame["time_bwd_ms"])
    return frame


def _series(frame: pd.DataFrame) -> pd.Series:
    varying = [f for f in SHAPE_FIELDS if f in frame and frame[f].nunique(dropna=False) > 1]
    # the device, where the rows name more than one: "full on NVIDIA H100"
    device = ["device_label"] if multi_device(frame) else []
    # batch too, where two points differ only in it (not where tokens per batch is held fixed)
    if "batch" in frame and frame.duplicated(["variant", "mode", "scope", "seq_len", *varying, *device]).any():
        varying.append("batch")
    if not varying and not device:
        return frame["variant"].copy()

    def label(r) -> str:
        text = f"{r['variant']} ({', '.join(f'{f}={r[f]}' for f in varying)})" if varying else str(r["variant"])
        return f"{text} on {r['device_label']}" if device else text

    return frame.apply(label, axis=1)


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
