"""How sure the GPU models are: where they were held against a real GPU (issue 39 item 4).

``checked.toml`` beside this file lists each check made on a real GPU: the GPU table key,
the measuring environment, the point kinds measured, the sizes, and the range of
measured / model each figure held within on those points (a claim the test
tests/profiler/predict/test_measured_gpu_bounds.py holds to the measured points).
``how_sure(identity, gpu)`` answers, for one point (``Point.identity()`` or a record) on
one GPU (a ``GpuSpec``), in one line: "checked on a real NVIDIA H200 (...): measured/model
allocated 1.00-1.01, ..." or "not checked on a real GPU: <the first reason>".

A point is *like* the checked ones when the GPU is the measured table entry (not a user's
file replacing it), its kind ("variant scope mode dtype") was measured, the variant label
has no options (those measured ran with the defaults), it runs forward and backward, and
every structural field is as measured (no AMP, optimizer, LM head, grouped KV heads, RoPE,
SwiGLU, RMSNorm, feed-forward chunks). Sizes (length, batch, width, heads, layers, the
MLP's width) may differ: the text names the sizes measured, and says when the point's are
outside them. Reads data only; imports neither torch nor pandas.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from attnprof.errors import UserError
from attnprof.profiler.records import IDENTITY_DEFAULTS, NO_MODE, variant_family
from attnprof.profiler.units import fmt_len, printable

BUILTIN_FILE = Path(__file__).with_name("checked.toml")
TEXT_FIELDS = ("gpu", "device_name", "torch", "cuda", "cudnn", "driver", "date", "measurements", "source")
SIZES = ("seq_len", "batch", "d_model", "heads", "layers", "d_ff")
RATIOS = ("allocated", "reserved", "total", "time")
RATIO_NAMES = {"allocated": "allocated", "reserved": "reserved", "total": "NVML total", "time": "fwd+bwd time"}
# Shape fields that are sizes, not structure: checked as SIZES (ffn_dim and ff_mult make d_ff)
SIZE_FIELDS = ("ffn_dim",)
# How a structural field that differs from what was measured is named (the others: name=value)
FEATURES = {"autocast": lambda v: f"AMP (autocast {v})", "optimizer": lambda v: f"an optimizer step ({v})",
            "vocab": lambda v: f"an LM head (vocab {v})", "rope": lambda v: "RoPE",
            "mlp": lambda v: f"the {v} MLP", "norm": lambda v: f"{v} norms"}


class CheckedTableError(UserError):
    """checked.toml (or a copy given to load_checks) that cannot be used."""


@dataclass(frozen=True)
class Check:
    """One check of the GPU models on a real GPU: what was measured and how close the models came."""

    gpu: str  # the GPU table key measured
    device_name: str
    torch: str
    cuda: str
    cudnn: str
    driver: str
    date: str
    measurements: str  # the measured points file, relative to the package root
    source: str
    points: int
    timed_points: int
    memory_kinds: tuple  # "variant scope mode dtype" measured (allocator peaks, NVML total)
    time_kinds: tuple  # of those, the ones timed
    sizes: dict  # size name -> (lowest, highest) measured
    ratios: dict  # figure -> (lowest, highest) measured / model over the points
    time_median_off: float  # median |measured/model - 1| of the timed points, at most

    def measurements_path(self) -> Path:
        return Path(__file__).resolve().parents[2] / self.measurements

    def sizes_text(self) -> str:
        words = []
        for name, unit in (("seq_len", "n"), ("batch", "batch"), ("d_model", "d_model"), ("heads", "heads"),
                           ("layers", "layers"), ("d_ff", "d_ff")):
            lo, hi = self.sizes[name]
            shown = fmt_len if name == "seq_len" else str
            value = shown(lo) if lo == hi else f"{shown(lo)}-{shown(hi)}"
            words.append(f"{value} {unit}" if unit in ("heads", "layers") else f"{unit} {value}")
        return ", ".join(words)


def _problem(where: str, name: str, what: str) -> CheckedTableError:
    return CheckedTableError(f"{where}: field {name!r} {what}")


def _pair(where: str, name: str, value, whole: bool) -> tuple:
    kinds = (int,) if whole else (int, float)
    ok = (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, kinds) and not isinstance(v, bool) and 0 < v < float("inf") for v in value)
          and value[0] <= value[1])
    if not ok:
        what = "whole numbers" if whole else "numbers"
        raise _problem(where, name, f"must be [lowest, highest], two positive {what}, got {value!r}")
    return value[0], value[1]


def parse_check(entry, where: str) -> Check:
    """One [[checks]] table -> Check, or CheckedTableError naming the field."""
    if not isinstance(entry, dict):
        raise CheckedTableError(f"{where}: is not a table of fields")
    known = set(TEXT_FIELDS) | {"points", "timed_points", "memory_kinds", "time_kinds", "sizes", "ratios",
                                "time_median_off"}
    unknown, missing = sorted(set(entry) - known), sorted(known - set(entry))
    if unknown:
        raise _problem(where, unknown[0], f"is not a known field; known: {', '.join(sorted(known))}")
    if missing:
        raise _problem(where, missing[0], "is missing")
    for name in TEXT_FIELDS:
        if not isinstance(entry[name], str) or not entry[name].strip():
            raise _problem(where, name, "must be a non-empty string")
    for name in ("points", "timed_points"):
        if type(entry[name]) is not int or entry[name] < 0:
            raise _problem(where, name, f"must be a whole number >= 0, got {entry[name]!r}")
    kinds = {}
    for name in ("memory_kinds", "time_kinds"):
        value = entry[name]
        if not isinstance(value, list) or not all(isinstance(k, str) and len(k.split()) == 4 for k in value):
            raise _problem(where, name, "must be a list of \"variant scope mode dtype\" texts")
        kinds[name] = tuple(value)
    if not set(kinds["time_kinds"]) <= set(kinds["memory_kinds"]):
        raise _problem(where, "time_kinds", "names a kind that memory_kinds lacks")
    tables = {}
    for name, keys, whole in (("sizes", SIZES, True), ("ratios", RATIOS, False)):
        table = entry[name]
        if not isinstance(table, dict) or set(table) != set(keys):
            raise _problem(where, name, f"must be a table of exactly {', '.join(keys)}")
        tables[name] = {k: _pair(where, f"{name}.{k}", table[k], whole) for k in keys}
    off = entry["time_median_off"]
    if isinstance(off, bool) or not isinstance(off, (int, float)) or not 0 <= off < float("inf"):
        raise _problem(where, "time_median_off", f"must be a number >= 0 such as 0.15, got {off!r}")
    return Check(**{k: entry[k].strip() for k in TEXT_FIELDS}, points=entry["points"],
                 timed_points=entry["timed_points"], memory_kinds=kinds["memory_kinds"],
                 time_kinds=kinds["time_kinds"], sizes=tables["sizes"], ratios=tables["ratios"],
                 time_median_off=float(off))


def load_checks(path: Union[str, Path] = BUILTIN_FILE) -> list[Check]:
    """The checks of a checked.toml (the package's own by default), in file order."""
    where = printable(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckedTableError(f"{where}: cannot read the GPU checks: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CheckedTableError(f"{where}: not valid TOML: {exc}") from None
    checks = data.get("checks")
    if set(data) != {"checks"} or not isinstance(checks, list):
        raise CheckedTableError(f"{where}: expected [[checks]] tables and nothing else")
    return [parse_check(entry, f"{where}: check {i + 1}") for i, entry in enumerate(checks)]


_BUILTIN: list = []


def builtin_checks() -> list[Check]:
    """The package's checks, read once per process."""
    if not _BUILTIN:
        _BUILTIN.extend(load_checks())
    return list(_BUILTIN)


# --- one point --------------------------------------------------------------------------------
def kind_of(identity: dict) -> str:
    """'sdpa model plain bfloat16': the variant label, scope, mode and dtype of a point."""
    return " ".join(str(identity.get(k)) for k in ("variant", "scope", "mode", "dtype"))


def _get(identity: dict, name: str):
    return identity.get(name, IDENTITY_DEFAULTS.get(name))


def _structure_problem(identity: dict) -> Optional[str]:
    """The first structural difference from every measured point, or None."""
    if _get(identity, "forward_only") is True:
        return "forward only (measured: forward and backward)"
    if identity.get("mode") not in ("plain", "checkpoint", NO_MODE):
        return f"{identity.get('mode')} mode"
    for name, default in IDENTITY_DEFAULTS.items():
        value = _get(identity, name)
        if name in SIZE_FIELDS or value == default:
            continue
        if name == "kv_heads":
            if value != identity.get("heads"):
                return f"grouped KV heads ({value} of {identity.get('heads')})"
            continue
        return FEATURES[name](value) if name in FEATURES else f"{name}={value}"
    if identity.get("ff_chunks", 1) != 1:
        return f"feed-forward in {identity.get('ff_chunks')} chunks"
    return None


def why_not(identity: dict, check: Check) -> Optional[str]:
    """Why ``identity`` is not like the points of ``check`` (the first reason), or None."""
    problem = _structure_problem(identity)
    if problem:
        return problem
    label = str(identity.get("variant"))
    family = variant_family(label)
    families = {k.split()[0] for k in check.memory_kinds}
    if family not in families:
        return f"variant {label}"
    if label != family:
        return f"variant {label} (measured with its default options only)"
    if str(identity.get("dtype")) not in {k.split()[3] for k in check.memory_kinds}:
        return f"dtype {identity.get('dtype')}"
    if kind_of(identity) not in check.memory_kinds:
        return f"{kind_of(identity)} was not measured"
    return None


def sizes_outside(identity: dict, check: Check) -> list[str]:
    """The sizes of ``identity`` outside those measured (layers and d_ff at scope model only)."""
    d_model = identity.get("d_model")
    d_ff = _get(identity, "ffn_dim") or ((identity.get("ff_mult") or 4) * d_model if isinstance(d_model, int) else None)
    values = {**{k: identity.get(k) for k in SIZES}, "d_ff": d_ff}
    out = []
    for name in SIZES:
        if identity.get("scope") != "model" and name in ("layers", "d_ff"):
            continue
        lo, hi = check.sizes[name]
        value = values[name]
        if not isinstance(value, int) or not lo <= value <= hi:
            out.append(name)
    return out


def claim_text(check: Check, timed: bool) -> str:
    """What a check says about the points like it: the environment, the sizes, the ranges."""
    r = check.ratios
    ratios = ", ".join(f"{RATIO_NAMES[k]} {r[k][0]:.2f}-{r[k][1]:.2f}" for k in ("allocated", "reserved", "total"))
    time = (f"{RATIO_NAMES['time']} {r['time'][0]:.2f}-{r['time'][1]:.2f} ({check.timed_points} points)" if timed
            else f"{RATIO_NAMES['time']} not measured for this kind")
    return (f"checked on a real {check.device_name} (torch {check.torch}, {check.date}; {check.points} points at "
            f"{check.sizes_text()}): measured/model {ratios}, {time}")


def how_sure(identity: dict, gpu, checks: Optional[list] = None) -> str:
    """One line: how close the GPU models came on a real GPU for points like ``identity`` on
    ``gpu`` (a GpuSpec), or why they were never checked there."""
    checks = builtin_checks() if checks is None else checks
    key = str(getattr(gpu, "key", gpu))
    mine = [c for c in checks if c.gpu == key]
    if not mine:
        measured = ", ".join(dict.fromkeys(c.gpu for c in checks)) or "none"
        return printable(f"not checked on a real GPU: {key} was never measured (measured: {measured})")
    if getattr(gpu, "overrides_builtin", False):
        return printable(f"not checked on a real GPU: this {key} comes from {getattr(gpu, 'origin', 'a file')}, "
                         f"not the table entry measured")
    reasons = [why_not(identity, c) for c in mine]
    if all(reasons):
        return printable(f"not checked on a real GPU: {reasons[0]}")
    check = mine[reasons.index(None)]
    text = claim_text(check, kind_of(identity) in check.time_kinds)
    outside = sizes_outside(identity, check)
    if outside:
        text += f"; this point's {', '.join(outside)} not among those measured"
    return printable(text)


# --- many points ------------------------------------------------------------------------------
FIELD = "gpu_checked"  # the record field holding how_sure's line (predict --gpu, its --json)
SHOWN_POINTS = 4  # points named per line before "and N more"


def summary_lines(records: list[dict]) -> list[str]:
    """The ``gpu_checked`` lines of a table's records: one line when every row says the same,
    else one per distinct text naming the rows it is for (by GPU, variant, mode and length:
    those of them that differ between rows)."""
    rows = [r for r in records if r.get(FIELD)]
    parts = [("gpu", "{}"), ("variant", "{}"), ("mode", "{}"), ("seq_len", "n={}")]
    varying = [(k, form) for k, form in parts if len({str(r.get(k)) for r in rows}) > 1]
    groups: dict = {}
    for r in rows:
        label = " ".join(form.format(r.get(k)) for k, form in varying)
        groups.setdefault(printable(r[FIELD]), {})[printable(label)] = None
    if len(groups) == 1:
        return [f"how sure (the GPU model against a real GPU): {next(iter(groups))}"]
    lines = []
    for text, labels in groups.items():
        names = list(labels)
        more = f" and {len(names) - SHOWN_POINTS} more" if len(names) > SHOWN_POINTS else ""
        lines.append(f"how sure, {', '.join(names[:SHOWN_POINTS])}{more}: {text}")
    return lines
