"""The CI memory gate behind ``attnprof gate``: a run against a checked-in baseline.

Exit codes: 0 pass, 1 a memory regression (each regressed point named, both figures and
the % change), 2 not comparable (a one-line ``error: ...``; never a traceback, never a
silent pass: zero points compared, a side with no ok point, or a non-finite or negative
tolerance is exit 2 too). What is compared and why: docs/ci-gate.md. The pieces:
``snapshot`` (a run folder, read and checked), ``baseline`` (the baseline file),
``checks`` (field types), ``verdict`` (the one judge
of a change, shared with the report), ``compare`` (point by point), ``format`` (terminal,
JSON) and ``markdown`` (step summary); this module is the entry point the CLI calls.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler import safeio, units
from attnprof.profiler.gate.baseline import (FORMAT, VERSION, Snapshot, point_label, read_baseline, read_run,
                                             update_baseline)
from attnprof.profiler.gate.compare import Comparison, GateResult, compare
from attnprof.profiler.gate.errors import GateError
from attnprof.profiler.gate.format import error_to_json, format_table, result_to_json
from attnprof.profiler.gate.markdown import format_error_markdown, format_markdown
from attnprof.profiler.gate.verdict import DEFAULT_ABS_TOLERANCE, DEFAULT_TOLERANCE_PCT, Tolerance
from attnprof.profiler.units import MIB as MiB

__all__ = ["FORMAT", "VERSION", "MiB", "Comparison", "GateError", "GateResult", "Snapshot", "Tolerance", "check_outputs", "compare",
           "format_markdown", "format_table", "parse_bytes", "parse_tolerance", "point_label", "read_baseline",
           "read_run", "result_to_json", "run_gate", "update_baseline"]

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions renders Markdown appended to this file


def parse_tolerance(text: str | float) -> float:
    """'2%', '2' or 2.0 -> 2.0 (percent); nan, inf and negatives are refused."""
    try:
        return units.parse_percent(text)
    except ValueError:
        raise GateError(f"--tolerance must be a finite percentage >= 0 like 2% or 0.5, got {text!r}") from None


def parse_bytes(text: str | int) -> int:
    """'1MiB', '512 KiB', '0', '1048576' -> bytes. KB/MB/GB are decimal, KiB/MiB/GiB binary."""
    try:
        return units.parse_bytes(text, allow_zero=True)
    except ValueError:
        raise GateError(f"--abs-tolerance must be a size like 64KiB, 1MiB or 0, got {text!r}") from None


def _write(path: str | Path, text: str, append: bool = False, what: str = "output") -> None:
    """Write or append, never through a planted link (``--json-out RUN/gate.json`` writes
    into a run folder, which is data): ``safeio``."""
    data = text.encode("utf-8")
    try:
        if not append:
            safeio.write_atomic(Path(path), data)
            return
        fd = safeio.open_append(Path(path))
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise GateError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    except safeio.LinkRefused as exc:
        raise GateError(str(exc)) from None


def _write_markdown(text: str, markdown_file: Optional[str | Path]) -> None:
    """Append to the GitHub step summary when set; write --markdown FILE when given."""
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        _write(summary, text, append=True, what=f"${SUMMARY_ENV}")
    if markdown_file:
        _write(markdown_file, text, what="--markdown file")


def _write_json(doc: dict, json_file: Optional[str | Path]) -> None:
    if json_file:
        _write(json_file, units.strict_json(doc, indent=2) + "\n", what="--json-out file")


def check_outputs(markdown_file: Optional[str | Path], json_file: Optional[str | Path]) -> None:
    """GateError, before any comparison is printed, for a --markdown or --json-out file that
    could not be written: a folder, a folder that does not exist, a name too long, a read-only place."""
    for path, what in ((markdown_file, "--markdown file"), (json_file, "--json-out file")):
        if not path:
            continue
        path = Path(path)
        try:
            safeio.check_file_writable(path, what, probe=True)
            folder, there = path.is_dir(), path.parent.is_dir()
        except safeio.UnwritablePath as exc:
            raise GateError(str(exc)) from None
        except OSError as exc:
            raise GateError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
        if folder or not there:
            raise GateError(f"cannot write {what} {path}: " + ("it is a folder" if folder else
                                                               f"folder {path.parent} does not exist"))


def run_gate(baseline: str | Path, run_dir: str | Path, tolerance_pct: float | str = DEFAULT_TOLERANCE_PCT,
             abs_tolerance_bytes: int | str = DEFAULT_ABS_TOLERANCE, allow_missing: bool = False,
             markdown_file: Optional[str | Path] = None, json_file: Optional[str | Path] = None,
             update: bool = False, out: Callable[[str], object] = print, skip_invalid: bool = False) -> int:
    """What ``attnprof gate`` does; returns the exit code (0 pass, 1 regression, 2 error).

    ``update`` (re)writes the baseline from the run instead of comparing. An invalid record
    in the run or the baseline is exit 2 (naming file and line) unless ``skip_invalid``:
    then it is left out, and the summary says how many were. Tolerances may be
    given as numbers or as the CLI's strings ('2%', '1MiB'). Every GateError becomes one
    ``error: ...`` line through ``out``, and exit code 2; one about the baseline or the run is
    in the summaries too (the CI step's summary says why), one about the command's own
    arguments (a tolerance, an output place) writes nothing.
    """
    try:
        if not update:
            check_outputs(markdown_file, json_file)  # refused before the table: no PASS printed, then an error
            tolerance, abs_tolerance = parse_tolerance(tolerance_pct), parse_bytes(abs_tolerance_bytes)
    except GateError as exc:  # the command's own arguments: refused before any output, no summary written
        out(f"error: {exc}")
        return 2
    try:
        if update:
            doc = update_baseline(baseline, run_dir, skip_invalid)
            ok = sum(1 for p in doc["points"] if p["status"] == "ok")
            skipped = doc.get("skipped_invalid")
            out(f"baseline {baseline} written from {run_dir}: {len(doc['points'])} points ({ok} ok), "
                f"scenario {doc['scenario'].get('name')!r}, {doc['device']} {doc['device_name']}".rstrip()
                + (f"; {skipped} invalid record(s) skipped (--skip-invalid)" if skipped else ""))
            return 0
        result = compare(baseline, run_dir, tolerance, abs_tolerance, allow_missing, skip_invalid)
        out(format_table(result).rstrip("\n"))
        _write_markdown(format_markdown(result), markdown_file)
        _write_json(result_to_json(result), json_file)
        return result.exit_code
    except GateError as exc:  # the baseline or the run cannot be compared: a CI step's summaries say why too
        out(f"error: {exc}")
        try:  # a failure to write them changes nothing
            _write_markdown(format_error_markdown(str(exc)), markdown_file)
            _write_json(error_to_json(str(exc)), json_file)
        except GateError:
            pass
        return 2
