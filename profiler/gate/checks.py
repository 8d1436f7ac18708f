"""Field types of a result record (or a baseline point), checked before anything uses them.

The gate and the report both read files that anyone can edit; a wrong type must become
a one-line error, never arithmetic on a string, an unhashable key or a traceback. The
expected types are read from ``PointRecord``'s annotations, not listed a second time.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, fields

from attnprof.profiler.records import STATUSES, PointRecord, Shape
from attnprof.profiler.units import INT64_MAX

MAX_INT = INT64_MAX  # a count beyond int64 is corrupt data (and overflows pandas and floats); runner/schema too
_FIELDS = {f.name: f for f in fields(PointRecord)}
# shape sizes: > 0; a later field of kind "amount" (records.later: 0 = off, e.g. ffn_dim, vocab) may be 0
_POSITIVE = {f.name for f in fields(Shape) if f.metadata.get("kind") != "amount"} | {"head_dim"}
ALWAYS = ("status",)  # has a default in PointRecord, but a record without one must not pass as "ok"
_KINDS = {"int": "an integer", "float": "a finite number from 0 to 2**63 - 1", "str": "a string", "bool": "true or false"}


def _kind(name: str) -> tuple[str, bool]:
    """('int', optional?) from an annotation such as 'Optional[int]'."""
    text = str(_FIELDS[name].type)
    optional = text.startswith("Optional[")
    return (text[len("Optional["):-1] if optional else text), optional


def _has_default(name: str) -> bool:
    f = _FIELDS[name]
    return f.default is not MISSING or f.default_factory is not MISSING


def _fits(kind: str, value, positive: bool) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) and (1 if positive else 0) <= value <= MAX_INT
    if kind == "float":
        return isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= MAX_INT  # as runner/schema
    if kind == "str":
        return isinstance(value, str)
    return True  # dicts and lists: not read by the gate or the report


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_problem(record: dict, name: str) -> str | None:
    """Why ``record[name]`` cannot be used, or None. A field with a default may be absent
    (records of older versions lack it); a required one may be neither absent nor null."""
    if name not in record:
        return None if _has_default(name) and name not in ALWAYS else f"lacks field {name}"
    value = record[name]
    kind, optional = _kind(name)
    if value is None:
        return None if optional else f"{name} is null"
    if not _fits(kind, value, name in _POSITIVE):
        what = _KINDS.get(kind, kind)
        if kind == "int":
            what = ("a positive integer" if name in _POSITIVE else
                    "a byte count (an integer >= 0)" if name.endswith("_bytes") else "an integer >= 0")
        return f"{name} must be {what}{' or null' if optional else ''}, got {_show(value)}"
    if name == "status" and value not in STATUSES:
        return f"unknown status {_show(value)} (one of {', '.join(STATUSES)})"
    return None


def record_problem(record, names) -> str | None:
    """The first problem of ``record`` with any of ``names`` (or its not being an object)."""
    if not isinstance(record, dict):
        return f"is {type(record).__name__}, not a JSON object"
    for name in names:
        problem = field_problem(record, name)
        if problem:
            return problem
    return None
