"""``export``: a run folder's records as a flat table for other tools (CSV, Parquet, JSON) or
as github-action-benchmark's input (``benchmark-action``).

The run folder is data from anyone, read the way ``report`` reads it: through the validated
reader (``storage.read_numbered``: every line type-checked), invalid lines left out and said
in one line on ``log``; a record holding a non-finite number is left out the same way. The
last record of a point wins (as in ``load_run``: ``--resume`` may have measured it again).
``out`` is written through ``safeio.write_atomic`` (never through a planted link, all at once).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from attnprof.api.overrides import Log, PathLike, quiet
from attnprof.arguments import UsageProblem, checked

FORMATS = ("csv", "parquet", "json", "benchmark-action")


@dataclass
class Exported:
    """What ``export`` made: the bytes (written to ``out`` when given), how many records they
    hold and how many invalid lines were left out."""

    format: str
    data: bytes
    out: Optional[Path]
    records: int
    skipped: int


@checked
def export(run_dir: PathLike, *, format: str = "csv", out: Optional[PathLike] = None, log: Log = quiet) -> Exported:
    """Export the records of ``run_dir`` (a sweep's run folder or a ``sweep --gpu-types``
    folder) as ``format``: csv | parquet | json | benchmark-action. With ``out`` the file is
    written there (Parquet needs it); without, ``Exported.data`` holds the bytes."""
    from attnprof.reports import benchmark_action, export_table

    if format not in FORMATS:
        raise UsageProblem(f"unknown export format {str(format)[:40]!r}; choose one of {', '.join(FORMATS)}")
    if format == "parquet":
        if out is None:
            raise UsageProblem("--format parquet writes a binary file: give --out FILE")
        export_table.import_pyarrow()  # missing: one line, before any work
    target = Path(out) if out is not None else None
    if target is not None:
        _check_target(target, Path(run_dir))
    records, skipped = read(Path(run_dir), log)
    write = {"csv": export_table.to_csv, "json": export_table.to_json, "parquet": export_table.to_parquet,
             "benchmark-action": benchmark_action.to_benchmark_action}[format]
    data = write(records)
    if target is not None:
        from attnprof.profiler import safeio

        try:
            safeio.write_atomic(target, data)
        except OSError as exc:
            raise UsageProblem(f"cannot write {target}: {exc.strerror or exc}") from None
    return Exported(format, data, target, len(records), skipped)


def _check_target(target: Path, run_dir: Path) -> None:
    """A folder, a file in a folder that does not exist, or one of the run's own files is
    refused before any work."""
    from attnprof.profiler import safeio
    from attnprof.profiler.runner.storage import WRITTEN_FILES
    from attnprof.reports.render_cache import RENDER_FILES

    try:  # the sweep's files and the report's (report.html, its charts, its caches)
        own = target.resolve().parent == run_dir.resolve() and target.name in WRITTEN_FILES + RENDER_FILES
    except (OSError, RuntimeError):
        own = False
    if own:
        raise UsageProblem(f"--out {target} is one of the run folder's own files; choose another name")
    safeio.check_file_writable(target, "--out", probe=True)  # a name too long, a read-only folder: one line
    try:
        folder, there = target.is_dir(), target.parent.is_dir()
    except OSError as exc:
        raise UsageProblem(f"--out {target}: {exc.strerror or exc}") from None
    if folder:
        raise UsageProblem(f"--out {target} is a folder; give a file name")
    if not there:
        raise UsageProblem(f"--out {target}: folder {target.parent} does not exist")


def read(run_dir: Path, log: Log = quiet) -> tuple[list[dict], int]:
    """The valid records of a run folder (each point's last), and how many lines were left out."""
    from attnprof.reports.data import GPU_TYPES_FILE, gpu_type_folders, one_line
    from attnprof.profiler.runner.storage import RESULTS_FILE

    if not run_dir.is_dir():
        raise UsageProblem(f"run folder not found: {run_dir}" if not run_dir.exists() else f"{run_dir} is not a folder")
    if not (run_dir / RESULTS_FILE).exists() and (run_dir / GPU_TYPES_FILE).is_file():
        records, skipped = [], 0
        for gpu_type, folder in gpu_type_folders(run_dir).items():
            if (folder / RESULTS_FILE).is_file():
                found, left_out = _read_one(folder, log, one_line)
                records += [{**r, "gpu_type": gpu_type} for r in found]
                skipped += left_out
    else:
        records, skipped = _read_one(run_dir, log, one_line)
    if not records:
        raise UsageProblem(f"{run_dir}: no valid record to export")
    return records, skipped


def _read_one(run_dir: Path, log: Log, one_line) -> tuple[list[dict], int]:
    from attnprof.profiler.records import key_of_record
    from attnprof.profiler.runner.storage import MAX_RESULTS_BYTES, RESULTS_FILE, read_numbered
    from attnprof.reports.export_table import non_finite

    file = run_dir / RESULTS_FILE
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise UsageProblem(f"{run_dir} has no {RESULTS_FILE} (is it a run folder?)") from None
    except OSError as exc:
        raise UsageProblem(one_line(f"cannot read {file}: {exc.strerror or exc}")) from None
    if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would block or never end
        raise UsageProblem(f"{file} is not a regular file")
    if info.st_size > MAX_RESULTS_BYTES:  # the limit every reader of a results file keeps
        raise UsageProblem(f"{file} is {info.st_size} bytes, too large to be a results file")
    numbered, problems = read_numbered(run_dir)
    if problems and problems[0].line == 0:
        raise UsageProblem(one_line(f"{file}: {problems[0]}"))
    problems = list(problems)
    latest: dict = {}
    for line, record in numbered:
        field = non_finite(record)
        if field:
            problems.append(_problem(line, f"{field} holds a number that is not finite"))
            continue
        latest.pop(key_of_record(record), None)
        latest[key_of_record(record)] = record
    if problems:
        problems.sort(key=lambda p: p.line)
        lines = ", ".join(str(p.line) for p in problems[:10]) + (f" and {len(problems) - 10} more"
                                                                  if len(problems) > 10 else "")
        log(one_line(f"skipped {len(problems)} invalid record(s) of {file}: line {lines} (first, {problems[0]}); "
                     f"the export holds the valid ones"))
    return list(latest.values()), len(problems)


def _problem(line: int, reason: str):
    from attnprof.profiler.runner.storage import Problem

    return Problem(line, reason)
