"""The GPU table: known GPUs as data (``gpus.toml`` beside this file), plus the user's own.

A user adds GPUs with a TOML file of the same form, named by ``ATTNPROF_GPUS`` (several
files: separated by ``os.pathsep``) or ``--gpu-file``; an entry whose key is already
known replaces it, and one that replaces a built-in GPU says so wherever its key is
printed (``GpuSpec.label``). A wrong or missing field is a ``GpuTableError`` naming the
file, the GPU and the field; an unknown ``--gpu NAME`` is an ``UnknownGpu`` listing the
known names. Both are one-line ``UserError``s (exit 2). Imports neither torch nor pandas.

A table file is data from anywhere (a colleague's, a download), so it is read as such: a
regular file only (never a FIFO that blocks or a device that never ends), opened without
blocking and read up to ``MAX_FILE_BYTES``; keys are case-folded and must be unique in a
file; every figure must be plausible for a GPU (``BOUNDS``), so a typo cannot model a
card with 1e30 bytes.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional, Union

from attnprof.errors import UserError
from attnprof.profiler.units import fmt_bytes, printable

BUILTIN_FILE = Path(__file__).with_name("gpus.toml")
ENV_VAR = "ATTNPROF_GPUS"
TFLOPS_REQUIRED = ("fp32", "tf32", "bf16", "fp16")
TFLOPS_OPTIONAL = ("fp64",)
# The CUDA context's device memory when the table gives none: an estimate (docs/gpu.md,
# "CUDA context"). torch 2.x with CUDA >= 11.7 loads kernels lazily (CUDA_MODULE_LOADING=
# LAZY), which keeps the context at roughly 300-600 MiB; 512 MiB is the middle of that.
DEFAULT_CONTEXT_BYTES = 512 << 20
MAX_FILE_BYTES = 1 << 20  # a table of a thousand GPUs is ~500 KiB; anything larger is not one
# What a GPU can be (field -> (lowest, highest)). Memory: 1 GiB to 16 TiB. The rest: a
# factor of 100 either side of the built-in table's smallest and largest figure
# (gpus.toml today: bandwidth 0.3 TB/s (L4) to 4.8 TB/s (H200); TFLOP/s, any dtype,
# 19.5 (A100 fp32) to 989.4 (H100/H200 bf16); SMs 58 (L4) to 142 (L40S), and at least 1).
# tests/profiler/hardware/test_gpus.py derives them again from the table.
BOUNDS = {"memory_bytes": (1 << 30, 16 << 40), "bandwidth_bytes_per_s": (0.3e12 / 100, 4.8e12 * 100),
          "tflops": (19.5 / 100, 989.4 * 100), "sm_count": (1, 142 * 100)}


class GpuTableError(UserError):
    """A GPU table file that cannot be used: unreadable, not TOML, or a bad field."""


class UnknownGpu(UserError):
    """A --gpu name that is in no table."""


@dataclass(frozen=True)
class GpuSpec:
    key: str  # what --gpu takes, e.g. "h100-sxm"
    name: str  # nvidia-smi's device name
    memory_bytes: int
    bandwidth_bytes_per_s: float
    compute_capability: tuple  # (major, minor)
    sm_count: int
    tflops: dict  # dtype -> peak dense TFLOP/s (fp32, tf32, bf16, fp16; fp64 optional)
    source: str
    context_bytes: int = DEFAULT_CONTEXT_BYTES
    context_estimated: bool = True  # False when the table gave context_bytes
    origin: str = ""  # the file this entry came from
    extra: dict = field(default_factory=dict)
    overrides_builtin: bool = False  # a user file's entry under a built-in key (it replaced that GPU)

    @property
    def label(self) -> str:
        """The key as printed: a user's entry under a built-in key says where it came from,
        so a 1 GiB "h100-sxm" from someone's file never passes for the datasheet's."""
        key = printable(self.key)
        return f"{key} (from {printable(self.origin)}, overrides built-in)" if self.overrides_builtin else key

    @property
    def cc_text(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def peak_flops(self, dtype: str) -> Optional[float]:
        """Peak dense FLOP/s for a torch dtype name (float32 -> tf32 tensor cores, as
        ``torch.backends.cuda.matmul.allow_tf32``; the fp32 figure otherwise)."""
        key = {"float32": "tf32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}.get(dtype, dtype)
        value = self.tflops.get(key)
        return None if value is None else value * 1e12

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name, "memory_bytes": self.memory_bytes,
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s, "compute_capability": self.cc_text,
                "sm_count": self.sm_count, "tflops": dict(self.tflops), "context_bytes": self.context_bytes,
                "context_estimated": self.context_estimated, "source": self.source, "origin": self.origin,
                "overrides_builtin": self.overrides_builtin}


def _problem(where: str, name: str, what: str) -> GpuTableError:
    return GpuTableError(f"{where}: field {name!r} {what}")


def _number(value, *, integer: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if integer and not isinstance(value, int):
        return False
    return math.isfinite(value) and value > 0


def _check_bounds(where: str, name: str, value, bound: str, unit: str) -> None:
    lo, hi = BOUNDS[bound]
    if not lo <= value <= hi:
        raise _problem(where, name, f"is {value:g} {unit}, which no GPU has; expected {lo:g} to {hi:g} {unit}")


def parse_entry(key: str, entry, origin: str) -> GpuSpec:
    """One [gpus.KEY] table -> GpuSpec, or GpuTableError naming the field."""
    where = f"{origin}: GPU {key!r}"
    if not isinstance(entry, dict):
        raise GpuTableError(f"{where}: is not a table of fields")
    known = {"name", "memory_bytes", "bandwidth_bytes_per_s", "compute_capability", "sm_count", "tflops",
             "context_bytes", "source"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise _problem(where, unknown[0], f"is not a known field; known: {', '.join(sorted(known))}")
    for name in ("name", "memory_bytes", "bandwidth_bytes_per_s", "compute_capability", "sm_count", "tflops",
                 "source"):
        if name not in entry:
            raise _problem(where, name, "is missing")
    for name in ("name", "source"):
        if not isinstance(entry[name], str) or not entry[name].strip():
            raise _problem(where, name, "must be a non-empty string")
    for name in ("memory_bytes", "sm_count"):
        if not _number(entry[name], integer=True):
            raise _problem(where, name, f"must be a positive integer, got {entry[name]!r}")
    if not _number(entry["bandwidth_bytes_per_s"]):
        raise _problem(where, "bandwidth_bytes_per_s", f"must be a positive number, got {entry['bandwidth_bytes_per_s']!r}")
    cc = entry["compute_capability"]
    parts = cc.split(".") if isinstance(cc, str) else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise _problem(where, "compute_capability", f"must be \"major.minor\" such as \"9.0\", got {cc!r}")
    tflops = entry["tflops"]
    if not isinstance(tflops, dict):
        raise _problem(where, "tflops", "must be a table such as { fp32 = 67.0, tf32 = 494.7, bf16 = 989.4, fp16 = 989.4 }")
    for dtype in TFLOPS_REQUIRED:
        if dtype not in tflops:
            raise _problem(where, f"tflops.{dtype}", "is missing")
    for dtype, value in tflops.items():
        if dtype not in TFLOPS_REQUIRED + TFLOPS_OPTIONAL:
            raise _problem(where, f"tflops.{dtype}", f"is not a known dtype; known: "
                                                     f"{', '.join(TFLOPS_REQUIRED + TFLOPS_OPTIONAL)}")
        if not _number(value):
            raise _problem(where, f"tflops.{dtype}", f"must be a positive number, got {value!r}")
    context = entry.get("context_bytes")
    if context is not None and not _number(context, integer=True):
        raise _problem(where, "context_bytes", f"must be a positive integer, got {context!r}")
    _check_bounds(where, "memory_bytes", entry["memory_bytes"], "memory_bytes", "B")
    _check_bounds(where, "bandwidth_bytes_per_s", entry["bandwidth_bytes_per_s"], "bandwidth_bytes_per_s", "B/s")
    _check_bounds(where, "sm_count", entry["sm_count"], "sm_count", "SMs")
    for dtype, value in tflops.items():
        _check_bounds(where, f"tflops.{dtype}", value, "tflops", "TFLOP/s")
    if context is not None and context >= entry["memory_bytes"]:
        raise _problem(where, "context_bytes", f"is {context} B, not below the GPU's memory_bytes")
    return GpuSpec(key=key.lower(), name=entry["name"].strip(), memory_bytes=entry["memory_bytes"],
                   bandwidth_bytes_per_s=float(entry["bandwidth_bytes_per_s"]),
                   compute_capability=(int(parts[0]), int(parts[1])), sm_count=entry["sm_count"],
                   tflops={k: float(v) for k, v in tflops.items()}, source=entry["source"].strip(),
                   context_bytes=context if context is not None else DEFAULT_CONTEXT_BYTES,
                   context_estimated=context is None, origin=origin)


def read_table(path: Union[str, Path]) -> dict[str, GpuSpec]:
    """The GPUs of one TOML file, by key; GpuTableError for anything wrong with it."""
    path = Path(path)
    where = printable(path)
    try:
        data = tomllib.loads(_read_bounded(path, where).decode("utf-8"))
    except FileNotFoundError:
        raise GpuTableError(f"{where}: GPU table file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuTableError(f"{where}: cannot read the GPU table: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GpuTableError(f"{where}: not valid TOML: {exc}") from None
    gpus = data.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise GpuTableError(f"{where}: no [gpus.NAME] tables (see attnprof/profiler/hardware/gpus.toml for the form)")
    extra = sorted(set(data) - {"gpus"})
    if extra:
        raise GpuTableError(f"{where}: unexpected top-level key {extra[0]!r}; GPUs go in [gpus.NAME] tables")
    out: dict[str, GpuSpec] = {}
    spelled: dict[str, str] = {}  # case-folded key -> as this file spells it
    for key, entry in gpus.items():
        if not key.replace("-", "").replace("_", "").isalnum() or not key.isascii():
            raise GpuTableError(f"{where}: GPU key {printable(repr(key))} must be ASCII letters, digits, '-' or '_'")
        folded = key.lower()
        if folded in spelled:  # --gpu is case-insensitive: two spellings would be one GPU, the later silently
            raise GpuTableError(f"{where}: GPU keys [gpus.{spelled[folded]}] and [gpus.{key}] are the same "
                                f"(keys are case-insensitive); keep one")
        spelled[folded] = key
        spec = parse_entry(key, entry, where)
        out[spec.key] = spec
    return out


def _read_bounded(path: Path, where: str) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES; GpuTableError otherwise.
    O_NONBLOCK: opening a FIFO never waits for a writer (and it is then refused)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, a device?)"
            raise GpuTableError(f"{where}: is {kind}; give a GPU table file (TOML)")
        if info.st_size > MAX_FILE_BYTES:
            raise GpuTableError(f"{where}: is {info.st_size} bytes; a GPU table file is at most {MAX_FILE_BYTES}")
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:  # bounded even if the file grows while it is read
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise GpuTableError(f"{where}: grew past {MAX_FILE_BYTES} bytes while it was read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def user_files(gpu_files: Iterable[Union[str, Path]] = ()) -> list[Path]:
    """ATTNPROF_GPUS's files, then the ones given (later ones win); one path alone is one file."""
    if isinstance(gpu_files, (str, os.PathLike)):
        gpu_files = [gpu_files]
    env = os.environ.get(ENV_VAR, "")
    return [Path(p) for p in env.split(os.pathsep) if p.strip()] + [Path(p) for p in gpu_files]


def load_gpus(gpu_files: Iterable[Union[str, Path]] = ()) -> dict[str, GpuSpec]:
    """The built-in table overlaid with ATTNPROF_GPUS's files and ``gpu_files``."""
    table = read_table(BUILTIN_FILE)
    builtin = set(table)
    for path in user_files(gpu_files):
        table.update({key: replace(spec, overrides_builtin=key in builtin) for key, spec in read_table(path).items()})
    return table


def get_gpu(name: str, table: Optional[dict] = None) -> GpuSpec:
    """A GPU by key (case-insensitive), or UnknownGpu listing the known keys."""
    table = load_gpus() if table is None else table
    spec = table.get(name.strip().lower())
    if spec is None:
        raise UnknownGpu(f"unknown GPU {name!r}; known: {', '.join(sorted(table))} "
                         f"(add one with --gpu-file or {ENV_VAR}=path.toml)")
    return spec


def by_device_name(device_name: str, table: Optional[dict] = None) -> Optional[GpuSpec]:
    """The table entry whose ``name`` is this device's (nvidia-smi's spelling, any case), or None."""
    wanted = (device_name or "").strip().lower()
    for spec in (load_gpus() if table is None else table).values():
        if wanted and spec.name.lower() == wanted:
            return spec
    return None


def resolve_gpus(names: Iterable[str], gpu_files: Iterable[Union[str, Path]] = ()) -> list[GpuSpec]:
    """--gpu NAME (repeatable, or comma lists) -> specs, in order, without duplicates."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:  # '' or ',,' names no GPU: refused, never a run that silently models none
        if not all(n.strip() for n in str(name).split(",")):
            raise UnknownGpu(f"--gpu {printable(repr(name))} has an empty GPU name; give keys such as h100-sxm,l4 "
                             f"(attnprof gpus lists them)")
    if not names:
        raise UnknownGpu("--gpu names no GPU; give keys such as h100-sxm,l4 (attnprof gpus lists them)")
    table = load_gpus(gpu_files)
    keys = [n.strip() for name in names for n in str(name).split(",")]
    return [get_gpu(k, table) for k in dict.fromkeys(k.lower() for k in keys)]


def format_gpus(table: dict[str, GpuSpec]) -> str:
    """`attnprof gpus`: one line per GPU, then its source."""
    head = ["key", "memory", "bandwidth", "cc", "SMs", "fp32", "tf32", "bf16", "fp16", "fp64", "name"]
    rows = [head]
    for spec in sorted(table.values(), key=lambda s: (s.memory_bytes, s.key)):
        t = spec.tflops
        rows.append([spec.label, fmt_bytes(spec.memory_bytes), f"{spec.bandwidth_bytes_per_s / 1e12:.2f} TB/s",
                     spec.cc_text, str(spec.sm_count), *(f"{t[d]:g}" if d in t else "-" for d in
                                                         ("fp32", "tf32", "bf16", "fp16", "fp64")), printable(spec.name)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("TFLOP/s: peak dense tensor-core figures from each datasheet (fp32: CUDA cores; fp16/bf16 with fp32 "
                 "accumulate); memory: nvidia-smi memory.total")
    lines += [printable(f"  {spec.key}: {spec.source}" + ("" if spec.origin == str(BUILTIN_FILE) else f" [from {spec.origin}]"))
              for spec in sorted(table.values(), key=lambda s: (s.memory_bytes, s.key))]
    return "\n".join(lines)
