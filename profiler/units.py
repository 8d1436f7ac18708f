"""Parsing and printing of byte sizes, percentages and FLOP counts."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int, allow_zero: bool = False) -> int:
    """'80GiB' -> 85899345920; '1.5 GB' -> 1500000000; bare numbers are bytes."""
    match = _SIZE.match(str(text))
    unit = match and match[2].lower()
    if not match or unit not in _UNITS:
        raise ValueError(f"cannot parse size {text!r}; use e.g. 80GiB, 512MiB, 16GB or a byte count")
    value = float(match[1]) * _UNITS[unit]
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"size {text!r} must be positive")
    return int(value)


def parse_percent(text: str) -> float:
    """'2%' or '2' -> 2.0 (percent)."""
    raw = str(text).strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"cannot parse percentage {text!r}; use e.g. 2%") from None
    if value < 0:
        raise ValueError(f"percentage {text!r} must not be negative")
    return value


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_flops(n) -> str:
    if n is None:
        return "-"
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} FLOP"
