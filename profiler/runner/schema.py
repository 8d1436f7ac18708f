"""Checking one line of results.jsonl before anything uses it.

A run folder is data from outside: a torn write, a disk error, another tool or a
person may have put anything there. Each line is parsed and type-checked against
``PointRecord``'s own field annotations (no second list of fields to keep in step),
so resume, reports and the gate only ever see records whose identity fields and
figures have the types the code expects. A bad line becomes a reason, never a crash.
"""

from __future__ import annotations

import json
import typing
from dataclasses import MISSING, fields
from functools import lru_cache
from typing import Optional

from attnprof.profiler.records import DTYPES, MODES, NO_MODE, SCOPES, STATUSES, PointRecord, Shape, ShapeError
from attnprof.profiler.units import INT64_MAX, NULL_REASON, short_number

MAX_LINE_BYTES = 1 << 20  # a record is a few KiB; anything this long is not one of ours
_CHOICES = {"status": STATUSES, "scope": SCOPES, "mode": MODES + (NO_MODE,), "dtype": DTYPES}
_SHAPE_FIELDS = tuple(f.name for f in fields(Shape))
# Every number a record holds is a size, a count, a byte count, a time, a rate or a pid: none
# is negative, none beyond int64 (torch's sizes and the byte counts are int64; pandas and floats
# overflow past it), none NaN or infinite. The gate's and the report's field checks
# (gate/checks.py) hold the same bounds, so a line this reader keeps is one they use.
# Fields with a default that a record must still carry: a line without a status is not a
# measured point, and reading it as the default ("ok") would let it pass the gate.
_REQUIRED_ANYWAY = ("status",)


@lru_cache(maxsize=None)
def _spec() -> dict:
    """field -> (base type, may be null, default or MISSING), from PointRecord's annotations."""
    hints = typing.get_type_hints(PointRecord)
    out = {}
    for f in fields(PointRecord):
        kind, nullable = hints[f.name], False
        args = typing.get_args(kind)
        if typing.get_origin(kind) is typing.Union and type(None) in args:
            nullable, kind = True, next(a for a in args if a is not type(None))
        default = f.default if f.default is not MISSING else (
            f.default_factory if f.default_factory is not MISSING else MISSING)
        out[f.name] = (typing.get_origin(kind) or kind, nullable, default)
    return out


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_problem(value, kind: type) -> Optional[str]:
    if kind is int:
        ok = type(value) is int
    elif kind is float:
        ok = _is_number(value)
    elif kind is bool:
        ok = type(value) is bool
    elif kind is dict:
        if not isinstance(value, dict):
            ok = False
        else:
            bad = [k for k, v in value.items() if not (_is_number(v) or v is None or _null_reason(k, v))]
            return f"holds {bad[0]!r}: {_kind(value[bad[0]])} where a number belongs" if bad else None
    elif kind is list:
        if not isinstance(value, list):
            ok = False
        else:
            bad = [v for v in value if not (_is_number(v) or v is None)]
            return f"holds {_kind(bad[0])} where a number belongs" if bad else None
    else:
        ok = isinstance(value, kind)
    return None if ok else f"expected {_name(kind)}, got {_kind(value)}"


def _null_reason(key, value) -> bool:
    """Whether this key of an object of numbers is the reason units.finite_json wrote beside a null."""
    return isinstance(key, str) and key.endswith(NULL_REASON) and isinstance(value, str)


def _numbers_back(item):
    """A list or object of numbers as it was before writing: units.finite_json writes a figure
    that is not finite (a NaN sample) as null inside them, so null reads back as NaN (a record
    written by the sweep is never refused on --resume for what the writer did itself)."""
    nan = float("nan")
    if isinstance(item, dict):  # without the KEY_null_reason finite_json put beside each
        return {k: nan if v is None else v for k, v in item.items() if not _null_reason(k, v)}
    return [nan if v is None else v for v in item]


def _name(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false",
            dict: "an object of numbers", list: "a list of numbers"}.get(kind, kind.__name__)


def _kind(value) -> str:
    """What a JSON value is, in words (never its repr: it may be huge or deeply nested)."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def check_record(value) -> tuple[Optional[dict], Optional[str]]:
    """A decoded JSON value -> (the record with every PointRecord field, None) or (None, why not).

    Fields missing from an older record take the dataclass default; unknown keys are
    dropped; identity fields must be present and must describe a valid Shape.
    """
    if not isinstance(value, dict):
        return None, f"{_kind(value)} where a record (an object) belongs"
    record = {}
    for name, (kind, nullable, default) in _spec().items():
        if name not in value:
            if default is MISSING or name in _REQUIRED_ANYWAY:
                return None, f"missing field {name}"
            record[name] = default() if callable(default) else default
            continue
        item = value[name]
        if item is None and nullable:
            record[name] = None
            continue
        problem = "is null" if item is None else _type_problem(item, kind)
        if problem:
            return None, f"{name} {problem}"
        low = -INT64_MAX if name in _SHAPE_FIELDS else 0  # a size below 1: Shape's own words, below
        if kind in (int, float) and not low <= item <= INT64_MAX:  # NaN fails too
            return None, f"{name} {short_number(item)} is not a {'count' if kind is int else 'finite number'} " \
                         f"from 0 to 2**63 - 1"
        if name in _CHOICES and item not in _CHOICES[name]:
            return None, f"{name} {item[:40]!r} is not one of {', '.join(_CHOICES[name])}"
        record[name] = _numbers_back(item) if kind in (list, dict) else item
    try:
        shape = Shape(**{k: record[k] for k in _SHAPE_FIELDS})
    except ShapeError as exc:
        return None, str(exc)
    if record["head_dim"] != shape.head_dim:
        return None, f"head_dim {record['head_dim']} is not d_model/heads = {shape.head_dim}"
    return record, None


def parse_line(raw: bytes) -> tuple[Optional[dict], Optional[str]]:
    """One line of results.jsonl (bytes, without its newline) -> (record, None) or (None, why not)."""
    if len(raw) > MAX_LINE_BYTES:
        return None, f"{len(raw)} bytes long, too long for a record"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text (binary data)"
    try:
        value = json.loads(text)
    except RecursionError:
        return None, "JSON nested too deeply"
    except ValueError as exc:  # JSONDecodeError
        return None, f"not valid JSON ({getattr(exc, 'msg', exc)} at column {getattr(exc, 'colno', '?')})"
    return check_record(value)
