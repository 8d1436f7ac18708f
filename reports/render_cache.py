"""The report's render caches in a run folder, read as data and written safely.

``report-predictions.json`` (versions tag -> point key -> predicted peak bytes) and
``report-gpu-predictions.json`` (GPU fingerprint -> point key -> the GPU model's gpu_*
fields) let a later render start where this one stopped. Both are keyed as the one
prediction cache is (profiler/predict/cache.py): the versions tag (entry schema, torch,
attnprof and the digest of attnprof's source files; a GPU fingerprint holds it), so an
entry written by other code is stale and never used. They sit in a run folder, so
they may come from anyone: each entry is validated as a result record's field is
(``gate.checks.field_problem``: a predicted peak is an integer byte count >= 0 within int64,
so -1, NaN, Infinity, 1.5 or "12" are not; every gpu_* field has its PointRecord type), and
a cached peak must also be > 0: a prediction is never 0 bytes (the inputs alone are bytes),
and a 0 would end the capacity curve in log(0); the file is read without following a link, without blocking on a FIFO and
up to a bound, and nesting too deep is a reason, not a RecursionError. Whatever is
invalid is ignored, reported in one line (``problem``), the file moved aside
(``warning``: ``NAME.unreadable-...``, never deleted) and a new one written without it. Writes go through ``safeio.write_atomic``: a planted link is refused, never followed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from attnprof.profiler import safeio
from attnprof.profiler.gate.checks import field_problem
from attnprof.profiler.predict.cache import versions_tag

CACHE_FILE = "report-predictions.json"
GPU_CACHE_FILE = "report-gpu-predictions.json"  # GPU model figures: {GPU fingerprint: {point key: gpu_* fields}}
CHARTS = ("memory", "time", "savings", "time-accuracy", "capacity", "timeline")  # report-<name>.png beside the page
# Every file a default render writes into the run folder (checked for planted links before
# any work: by the render, and by a sweep that will render at its end)
RENDER_FILES = ("report.html", *(f"report-{name}.png" for name in CHARTS), CACHE_FILE, GPU_CACHE_FILE)
MAX_CACHE_BYTES = 64 << 20  # a cache is KiB; beyond this it is not one


def _load(run_dir: Path | None, name: str) -> tuple[object, Optional[str]]:
    """The decoded JSON of a cache file ({} when absent), and why it is unusable (or None)."""
    if not run_dir:
        return {}, None
    try:
        raw = safeio.read_bounded(Path(run_dir) / name, MAX_CACHE_BYTES)
        return (json.loads(raw.decode("utf-8")) if raw is not None else {}), None
    except RecursionError:
        return {}, "nested too deeply"
    except UnicodeDecodeError:
        return {}, "not UTF-8 text"
    except safeio.LinkRefused:
        raise
    except ValueError as exc:  # JSONDecodeError, or too large
        return {}, f"not valid JSON ({exc.msg})" if hasattr(exc, "msg") else str(exc)
    except OSError as exc:
        return {}, f"unreadable ({exc.strerror or exc})"


def peak_problem(value) -> Optional[str]:
    """Why a cached peak is no predicted peak, or None: as a result's predicted_peak_bytes
    (``field_problem``), and not 0."""
    if value is None:  # a record may lack a prediction; a cache entry is one
        return "null where a predicted peak belongs"
    problem = field_problem({"predicted_peak_bytes": value}, "predicted_peak_bytes")
    if problem is None and value == 0:
        return "predicted_peak_bytes must be > 0 (no prediction is 0 bytes), got 0"
    return problem


def _counted(bad: list, total: int) -> Optional[str]:
    if not bad:
        return None
    key, why = bad[0]
    return f"{len(bad)} of {total} entries invalid (first: {str(key)[:60]!r}: {why})"


def read_cache(run_dir: Path | None) -> tuple[dict, Optional[str]]:
    """Earlier renders' predictions under this code's versions (point key -> bytes), and a
    one-line problem or None. Entries under another versions tag are stale: left out,
    not a problem (``write_cache`` drops them)."""
    data, problem = _load(run_dir, CACHE_FILE)
    if problem:
        return {}, problem
    if not isinstance(data, dict):
        return {}, "not a JSON object"
    # an entry of the unversioned layout (point key -> bytes) is stale: dropped silently
    data = {v: p for v, p in data.items() if isinstance(p, dict) or peak_problem(p) is not None}
    out, bad, total = _two_levels(data, lambda value: (value, peak_problem(value)))
    return out.get(versions_tag(), {}), _counted(bad, total)


def write_cache(run_dir: Path | None, cache: dict, force: bool = False) -> None:
    """Write the predictions (point key -> bytes) under this code's versions tag."""
    write(run_dir, CACHE_FILE, {versions_tag(): cache} if cache else {}, force=force)


def clean_fields(fields) -> Optional[dict]:
    """A record's gpu_* fields as data: known names, each of its PointRecord type (byte
    counts integers >= 0, figures finite), a total > 0 and a boolean fit; None for anything
    else (a hostile or stale cache file)."""
    from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS

    if not isinstance(fields, dict):
        return None
    out = {k: fields.get(k) for k in GPU_FIELDS}
    if out["gpu_total_bytes"] in (None, 0) or not isinstance(out["gpu_fits"], bool):
        return None
    if any(out[k] is not None and field_problem(out, k) for k in GPU_FIELDS):  # each as a result record's field
        return None
    if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 for v in out.values()):
        return None  # bytes, times and tokens/s: none negative (results' model figures: runner/schema.py)
    return out


def read_gpu_cache(run_dir: Path | None) -> tuple[dict, Optional[str]]:
    """Earlier model figures, GPU fingerprint -> point key -> gpu_* fields, and a one-line
    problem or None."""
    data, problem = _load(run_dir, GPU_CACHE_FILE)
    if problem:
        return {}, problem
    if not isinstance(data, dict):
        return {}, "not a JSON object"

    def clean(fields):
        kept = clean_fields(fields)
        return kept, None if kept is not None else "not the GPU model's fields"

    out, bad, total = _two_levels(data, clean)
    return out, _counted(bad, total)


def _two_levels(data: dict, clean) -> tuple[dict, list, int]:
    """A cache file's ``{outer key: {point key: value}}`` read as data, the one reader of
    both files: each value through ``clean`` (-> the value kept, or why not), any other
    shape counted bad. Returns (outer -> point key -> kept value, [(key, why)], entries)."""
    out: dict = {}
    bad, total = [], 0
    for outer, points in data.items():
        if not isinstance(points, dict):
            bad.append((outer, f"{type(points).__name__} where an object of points belongs"))
            total += 1
            continue
        for key, value in points.items():
            total += 1
            kept, why = clean(value)
            if why:
                bad.append((key, why))
            else:
                out.setdefault(outer, {})[key] = kept
    return out, bad, total


def write(run_dir: Path | None, name: str, cache: dict, force: bool = False) -> None:
    """Write a render cache into the run folder; nothing to write (unless ``force``: a bad
    file to replace), or no folder, writes nothing. A read-only folder is no error (the
    report still renders, only slower next time); a planted link is (LinkRefused)."""
    if not run_dir or not (cache or force):
        return
    try:
        safeio.write_atomic(Path(run_dir) / name, json.dumps(cache, indent=0).encode("utf-8"))
    except OSError:
        pass


def warning(run_dir: Path, name: str, problem: str) -> str:
    """The one line for a cache file with ``problem``, which is first renamed beside itself
    (safeio.move_aside: ``NAME.unreadable-...``), so the file written next never destroys what
    could not be read; where it cannot be moved, the line says so and it is rewritten."""
    path = Path(run_dir) / name
    try:
        kept = f"kept as {safeio.move_aside(path).name}"
    except FileNotFoundError:
        kept = "it is gone"
    except OSError as exc:
        kept = f"it could not be moved aside ({exc.strerror or exc})"
    return f"warning: {path}: {problem}; ignored ({kept}), and a new file written without it"
