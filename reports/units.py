"""How numbers read in the report: bytes in binary units, lengths as 4K/64K/1M, times in ms/s."""

from __future__ import annotations

import math

GIB = 1 << 30  # bytes; budgets and chart ticks are binary units (MiB = 2**20 bytes)
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def missing(value) -> bool:
    """None or NaN: pandas turns a missing number into NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_bytes(value, digits: int = 3) -> str:
    """4194304 -> '4 MiB'; 1.5e9 -> '1.4 GiB'; missing -> ''."""
    if missing(value):
        return ""
    value = float(value)
    unit = 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.{digits}g} {_BYTE_UNITS[unit]}"


def fmt_len(n) -> str:
    """Token counts as people say them: 256, 4K, 64K, 1M (exact powers of two only)."""
    if missing(n):
        return ""
    n = int(n)
    for shift, suffix in ((20, "M"), (10, "K")):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def fmt_ms(value) -> str:
    """Milliseconds, switching to seconds from 1000 ms."""
    if missing(value):
        return ""
    value = float(value)
    if value >= 1000:
        return f"{value / 1000:.3g} s"
    return f"{value:.3g} ms"


def fmt_pct(value) -> str:
    return "" if missing(value) else f"{value:+.1f}%"


def mpl_text(text: str) -> str:
    """A label matplotlib shows verbatim: '$' would start mathtext (and can fail to parse)."""
    return str(text).replace("$", r"\$")
