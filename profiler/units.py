"""How attnprof reads and prints sizes, lengths, times and percentages: one place, so a
number prints the same way in the terminal, the gate's summaries and the report.

Bytes print in binary units with two decimals (``1.50 KiB``, ``4.00 MiB``), from the one
table of units ``parse_bytes`` reads too; a missing value (None, NaN) prints as ``blank``
("-" unless the caller chooses another text). What a program reads (``--json``, results,
exports) is written by ``strict_json``: RFC 8259 JSON, no NaN or Infinity.
"""

from __future__ import annotations

import json
import math
import numbers
import re

KIB, MIB, GIB, TIB, PIB = (1 << 10), (1 << 20), (1 << 30), (1 << 40), (1 << 50)
# torch indexes tensors with int64, and attnprof records byte counts as int64: a tensor of
# 2**63 bytes (or elements) or more cannot exist. The one definition (scenario, plan, variant options).
INT64_MAX = 2**63 - 1
# The report's soft time target in seconds (charts, and capacity predictions a run lacks):
# ``attnprof report --seconds``, ``api.report`` and a sweep's report. Here, low and light,
# so the command line shows it in --help without importing the api.
REPORT_SECONDS = 7.0
MISSING = "-"  # what a missing number prints as, unless the caller says otherwise

# THE table of byte units: fmt_bytes prints the binary ones (largest first), and parse_bytes
# reads every name here (case-insensitive), so whatever is printed can be typed back. Binary
# prefixes (KiB = 2**10) and decimal ones (kB = 10**3) as IEC 80000-13 defines them; a bare
# K/M/G/T/P is binary, as in most memory tools (``free -h``, torch's memory_summary).
BYTE_UNITS = (("PiB", PIB), ("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1))
DECIMAL_UNITS = (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))
_UNITS = {"": 1, **{name.lower(): size for name, size in BYTE_UNITS + DECIMAL_UNITS},
          **{name[0].lower(): size for name, size in BYTE_UNITS if name != "B"}}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


# --- reading --------------------------------------------------------------------------------
def parse_bytes(text: str | int, allow_zero: bool = False) -> int:
    """'80GiB' -> 85899345920; '1.5 GB' -> 1500000000; bare numbers are bytes."""
    match = _SIZE.match(str(text))
    unit = match and match[2].lower()
    if not match or unit not in _UNITS:
        raise ValueError(f"cannot parse size {text!r}; use a byte count or a number with a unit: "
                         f"{', '.join(n for n, _ in BYTE_UNITS + DECIMAL_UNITS)} (e.g. 80GiB, 512MiB, 16GB)")
    value = float(match[1]) * _UNITS[unit]
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"size {text!r} must be positive")
    if value > 2**63:  # beyond what torch (and a record) can count: int64
        raise ValueError(f"size {text!r} is more than 2**63 - 1 bytes ({fmt_bytes(INT64_MAX)}), more than any "
                         f"memory can hold")
    return min(int(value), INT64_MAX)  # INT64_MAX prints as 8192.00 PiB, which is 2**63: read back as itself


def parse_percent(text: str | float) -> float:
    """'2%' or '2' -> 2.0 (percent). Refuses negative and non-finite values (nan, inf)."""
    raw = str(text).strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"cannot parse percentage {text!r}; use e.g. 2%") from None
    if not math.isfinite(value):
        raise ValueError(f"percentage {text!r} must be a finite number")
    if value < 0:
        raise ValueError(f"percentage {text!r} must not be negative")
    return value


# --- printing -------------------------------------------------------------------------------
def missing(value) -> bool:
    """None, NaN (pandas' missing number) or pandas.NA."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN is the one value unequal to itself
    except (TypeError, ValueError):  # pandas.NA refuses bool()
        return True


def fmt_bytes(n, blank: str = MISSING) -> str:
    """4194304 -> '4.00 MiB'; 1536 -> '1.50 KiB'; 512 -> '512 B'; missing -> ``blank``."""
    if missing(n):
        return blank
    n = float(n)
    if not math.isfinite(n):
        return f"{n} B"
    for unit, size in BYTE_UNITS[:-1]:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_flops(n, blank: str = MISSING) -> str:
    if missing(n):
        return blank
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} FLOP"


def fmt_len(n, blank: str = MISSING) -> str:
    """Token counts as people say them: 256, 4K, 64K, 1M (exact powers of two only)."""
    if missing(n):
        return blank
    n = int(n)
    for shift, suffix in ((20, "M"), (10, "K")):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def fmt_ms(value, blank: str = MISSING) -> str:
    """Milliseconds to three significant digits, switching to seconds from 1000 ms."""
    if missing(value) or not math.isfinite(float(value)):  # an infinite time is no time: blank
        return blank
    value = float(value)
    if value >= 1000:
        return f"{value / 1000:.3g} s"
    return f"{value:.3g} ms"


def fmt_pct(value, blank: str = MISSING) -> str:
    """A signed change in percent: +11.1%."""
    return blank if missing(value) else f"{value:+.1f}%"


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def short_number(value) -> str:
    """A number as it was given, or, past 24 digits, how many bits it has (a refusal quotes the
    figure it refuses: a 401-digit byte count is no message, and ``str`` of an int past 4300
    digits raises)."""
    if isinstance(value, float) or abs(value) < 10**24:
        return repr(value)
    return f"an integer of {value.bit_length()} bits"


def printable(text) -> str:
    """Text on one line with every control character spelled out (newline as \\n, ESC as
    \\x1b, a bidi override as \\u202e): a variant label or a GPU name from a file cannot
    break a table row, a log line or a terminal, nor reorder what a reader sees. The one
    escaping of names for the terminal, the Markdown and (before HTML escaping) the report."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else
                   _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
                   for ch in text)


def mpl_text(text) -> str:
    """A label matplotlib shows verbatim: '$' would start mathtext (and can fail to parse);
    control characters are spelled out (``printable``)."""
    return printable(text).replace("$", r"\$")


def text_table(head: list, rows: list) -> list[str]:
    """A terminal table's lines: ``head`` then ``rows``, columns padded to their widest cell
    and two spaces apart; every cell is ``printable`` (names spelled out, never run)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [head, *rows]]


# --- JSON for programs --------------------------------------------------------------------------
NULL_REASON = "_null_reason"  # beside a figure that was not finite: KEY + this, why KEY is null


def _not_finite(value) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, (bool, int))
            and not math.isfinite(float(value)))


def finite_json(value):
    """``value`` (dicts, lists, tuples, scalars) with every non-finite number (NaN, inf)
    made None; in an object, ``KEY`` made None gets ``KEY_null_reason`` beside it."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if _not_finite(item):
                out[key] = None
                out[f"{key}{NULL_REASON}"] = f"not a finite number ({float(item)!r})"
            else:
                out[key] = finite_json(item)
        return out
    if isinstance(value, (list, tuple)):
        return [None if _not_finite(item) else finite_json(item) for item in value]
    return None if _not_finite(value) else value


def strict_json(value, **dumps) -> str:
    """THE JSON every output a program reads goes through (``--json``, results.jsonl, export,
    the gate's file): RFC 8259 JSON, which has no NaN or Infinity (json.dumps writes them by
    default, and jq, browsers and strict parsers refuse the whole text): ``finite_json``, then
    ``json.dumps(..., allow_nan=False)``. ``dumps``: json.dumps' other keywords."""
    return json.dumps(finite_json(value), allow_nan=False, **dumps)
