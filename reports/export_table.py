"""A run's records as a flat table for other tools (``attnprof export``): CSV, JSON, Parquet.

Why a flat table: spreadsheets, pandas, DuckDB and dashboards want one row per point
and one scalar per cell, with the units in the column names as the records already have
them (``peak_bytes``, ``time_fwd_ms``). The columns are ``PointRecord``'s fields in its
order (no second list to keep in step), with two changes that keep every cell scalar:

- each object field (``predicted_breakdown_bytes``: category -> bytes; ``point_phases_s``:
  phase -> seconds) becomes one column per key, ``FIELD.KEY`` (the union over the rows,
  sorted; empty where a row lacks it);
- the timing samples (lists) stay lists in JSON and are JSON text in CSV and Parquet.

Two columns are added in front: ``point``, the point's stable name (``benchmark_action``
names its entries after it), and, for a ``sweep --gpu-types`` folder, ``gpu_type``; and
``time_ms`` (forward + backward, ``records.step_time_ms``) after the timing fields.

The records come from a run folder, which is data from anyone: a text cell that a
spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return) is written to CSV behind a ``'`` (OWASP's advice for CSV injection), and
every control character, lone surrogate or bidi control in a CSV text cell is spelled out (``printable``:
a raw CR split rows, since the csv module quotes only its own line terminator; ESC reached
the terminal); JSON is ASCII with every control character escaped; nothing non-finite is
written.
"""

from __future__ import annotations

import csv
import io
import math
import typing
import unicodedata
from dataclasses import fields
from functools import lru_cache

from attnprof.errors import UserError
from attnprof.profiler.records import PointRecord, step_time_ms
from attnprof.profiler.units import printable, strict_json
from attnprof.reports.benchmark_action import point_name

BREAKDOWN = "predicted_breakdown_bytes"
OBJECT_FIELDS = (BREAKDOWN, "point_phases_s")  # key -> number: one column per key
LIST_FIELDS = ("time_fwd_samples_ms", "time_bwd_samples_ms")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PARQUET_HINT = "pip install 'attnprof[parquet]' (or: pip install pyarrow)"


class ExportError(UserError):
    """An export that cannot be written as asked; the message is one line."""


def non_finite(record: dict) -> str | None:
    """The first field of ``record`` holding NaN or an infinity (in a list or a dict too), or None.
    JSON readers refuse such numbers, and a spreadsheet would read them as text."""
    for name, value in record.items():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            return name
    return None


def columns(records: list[dict], gpu_types: bool = False) -> list[str]:
    """The table's columns for these records, in order."""
    out = ["point"] + (["gpu_type"] if gpu_types else [])
    for f in fields(PointRecord):
        if f.name in OBJECT_FIELDS:
            keys = sorted({str(k) for r in records for k in (r.get(f.name) or {})})
            out += [f"{f.name}.{k}" for k in keys]
            continue
        out.append(f.name)
        if f.name == "time_bwd_ms":
            out.append("time_ms")
    return out


def row_of(record: dict) -> dict:
    """One record as a flat row (lists kept; ``to_csv`` and ``to_parquet`` turn them into text)."""
    row = {"point": point_name(record)}
    if "gpu_type" in record:
        row["gpu_type"] = record["gpu_type"]
    for f in fields(PointRecord):
        value = record.get(f.name)
        if f.name in OBJECT_FIELDS:
            for key, amount in (value or {}).items():
                row[f"{f.name}.{key}"] = amount
            continue
        row[f.name] = value
        if f.name == "time_bwd_ms":
            row["time_ms"] = step_time_ms(record.get("time_fwd_ms"), value)
    return row


def table(records: list[dict]) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the records: every row has every column (None where it has none)."""
    cols = columns(records, gpu_types=any("gpu_type" in r for r in records))
    rows = [row_of(r) for r in records]
    return cols, [{c: row.get(c) for c in cols} for row in rows]


# --- the formats -------------------------------------------------------------------------------
def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, (list, dict)):
        return strict_json(value)
    text = str(value)
    if text.startswith(FORMULA_START):
        text = "'" + text
    # a CR, ESC or lone surrogate from a hostile run folder: spelled out, never raw; other text (é, a
    # no-break space, an emoji's joiner) kept as it is
    return "".join(printable(ch) if _unsafe(ch) else ch for ch in text) if not text.isprintable() else text


def _unsafe(ch: str) -> bool:
    """A control character, a lone surrogate, a line or paragraph separator (U+2028, U+2029:
    line breaks to Python's splitlines and to editors, so they split a row) or a bidi control
    (it reorders what a reader sees)."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ch in BIDI_CONTROLS


BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def to_csv(records: list[dict]) -> bytes:
    """The table as CSV (RFC 4180 quoting, a header row, UTF-8)."""
    cols, rows = table(records)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([_csv_cell(c) for c in cols])
    for row in rows:
        writer.writerow([_csv_cell(row[c]) for c in cols])
    return buffer.getvalue().encode("utf-8")


def to_json(records: list[dict]) -> bytes:
    """The table as a JSON array of row objects (one per point, every column in each)."""
    _, rows = table(records)
    return (strict_json(rows, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def import_pyarrow():
    """``(pyarrow, pyarrow.parquet)``, or ExportError in one line saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet as parquet
    except ImportError:
        raise ExportError(f"--format parquet needs pyarrow, which is not installed: {PARQUET_HINT}") from None
    return pyarrow, parquet


@lru_cache(maxsize=None)
def _kinds() -> dict:
    """field -> int | float | bool | str | list | dict, from PointRecord's annotations."""
    out = {}
    for name, hint in typing.get_type_hints(PointRecord).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        kind = args[0] if typing.get_origin(hint) is typing.Union else hint
        out[name] = typing.get_origin(kind) or kind
    return out


def parquet_schema(pa, cols: list[str], rows: list[dict]):
    """A pyarrow schema from the record's annotations (never inferred from hostile values)."""
    arrow = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string(), list: pa.string()}
    kinds = _kinds()
    out = []
    for c in cols:
        if c.partition(".")[0] in OBJECT_FIELDS:
            ints = all(isinstance(r[c], int) for r in rows if r[c] is not None)
            out.append(pa.field(c, pa.int64() if ints else pa.float64()))
        else:
            out.append(pa.field(c, arrow.get(kinds.get(c, float if c == "time_ms" else str), pa.string())))
    return pa.schema(out)


def to_parquet(records: list[dict]) -> bytes:
    """The table as a Parquet file (pyarrow, the ``parquet`` extra); lists as JSON text."""
    pa, parquet = import_pyarrow()
    cols, rows = table(records)
    rows = [{c: (strict_json(v) if isinstance(v, list) else v) for c, v in row.items()} for row in rows]
    sink = pa.BufferOutputStream()
    parquet.write_table(pa.Table.from_pylist(rows, schema=parquet_schema(pa, cols, rows)), sink)
    return sink.getvalue().to_pybytes()
