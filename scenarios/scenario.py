"""Scenarios as data: a TOML file names the variants, modes, lengths and shape of a sweep.

Built-in files live in ``scenarios/presets/``; ``--scenario NAME`` finds them there,
``--scenario PATH`` reads any file. Command-line flags override the file's values.
What each overridable field is (type, unit, default, help) and which rule its values
obey is written once, in ``scenarios/fields.py``; ``Scenario`` holds them.

Every value is checked field by field when a ``Scenario`` is built, whether it came
from a file, a flag or code: a wrong type, a non-finite timeout or a length whose
n x n scores could not even be counted in int64 is a one-line ``ScenarioError``.
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

from attnprof.errors import UserError
from attnprof.profiler.records import (DTYPE_BYTES, MAX_LAYERS, MLPS, NORMS, ShapeError, canonical_dtype,
                                       precision_problem)
from attnprof.profiler.records import OPTIMIZER_IMPLS, OPTIMIZERS  # issue 24: optimizer
from attnprof.profiler.units import INT64_MAX
from attnprof.scenarios.fields import BY_NAME, default, names_of

PRESETS = Path(__file__).parent / "presets"
MAX_FILE_BYTES = 1 << 20  # a scenario is a few lines of TOML; anything bigger is the wrong file
MAX_POINT_TIMEOUT_S = 7 * 24 * 3600.0  # a week; the worker's pipe poll overflows near 2**31 ms
FF_MULT = 4  # the stack's d_ff = FF_MULT * d_model (records.Shape.ff_mult's default)
_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ScenarioError(UserError):
    """A scenario that cannot be loaded; the message is one line."""


# Field kinds (scenarios/fields.py), checked in this order, each in Scenario's field order.
_IMPLS_SHOWN = ", ".join(i or '""' for i in OPTIMIZER_IMPLS)  # issue 24: optimizer

# Lists arrive from TOML (and to_dict) and are kept as tuples.
_LIST_ITEMS = {"labels": str, "lengths": int}


@dataclass(frozen=True)
class Scenario:
    """A sweep's scenario. The overridable fields' types, units, defaults and help text are
    in ``scenarios/fields.py`` (FIELDS); name, description and source say where it came from."""

    name: str = "default"
    description: str = ""
    variants: tuple = default("variants")
    modes: tuple = default("modes")
    scope: str = default("scope")
    seq_lens: tuple = default("seq_lens")
    min_len: int = default("min_len")
    max_len: int = default("max_len")
    batch: int = default("batch")
    tokens_per_batch: int = default("tokens_per_batch")
    d_model: int = default("d_model")
    heads: int = default("heads")
    layers: int = default("layers")
    dtype: str = default("dtype")
    ff_chunks: int = default("ff_chunks")
    forward_only: bool = default("forward_only")
    # --- issue 24: block options ---
    mlp: str = default("mlp")
    ffn_dim: int = default("ffn_dim")
    norm: str = default("norm")
    precision: str = default("precision")  # --- issue 24: precision --- ("" = as dtype says)
    # --- issue 24: optimizer ---
    optimizer: str = default("optimizer")
    optimizer_impl: str = default("optimizer_impl")
    # --- issue 24: lm ---
    vocab: int = default("vocab")
    tie_embeddings: bool = default("tie_embeddings")
    loss_chunks: int = default("loss_chunks")
    # --- issue 24: attention ---
    kv_heads: int = default("kv_heads")
    rope: bool = default("rope")
    repeats: int = default("repeats")
    warmup: int = default("warmup")
    point_timeout_s: float = default("point_timeout_s")
    source: str = ""  # the file it came from

    def __post_init__(self):
        """Every value checked once, whether it came from a file, a flag or code."""
        if isinstance(self.source, str) and self.source:
            where = Path(self.source).name  # the file's name says more than the scenario's
        else:
            where = self.name if isinstance(self.name, str) else "(unnamed)"

        def need(ok: bool, text: str) -> None:
            if not ok:
                raise ScenarioError(f"scenario {where}: {text}")

        for key in _kind("text"):
            value = getattr(self, key)
            need(isinstance(value, str), f"{key} must be a string, got {_shown(value)}")
        for key in (*_kind("labels"), *_kind("lengths")):
            value = getattr(self, key)
            kind = _LIST_ITEMS[BY_NAME[key].kind]
            wanted = _LIST_WANTED[key]
            hint = f' (write [{value!r}])'.replace("'", '"') if isinstance(value, str) and kind is str else ""
            need(isinstance(value, (list, tuple)), f"{key} must be {wanted}, got {_shown(value)}{hint}")
            need(all(_is(item, kind) for item in value), f"{key} must be {wanted}, got {_shown(value)}")
            object.__setattr__(self, key, tuple(value))
        for key in _kind("count"):
            value = getattr(self, key)
            need(_is(value, int) and value > 0, f"{key} must be a positive integer, got {_shown(value)}")
        for key in _kind("amount"):
            value = getattr(self, key)
            need(_is(value, int) and value >= 0, f"{key} must be an integer >= 0, got {_shown(value)}")
        need(all(n > 0 for n in self.seq_lens), f"seq_lens must be positive integers, got {_shown(self.seq_lens)}")
        need(self.layers <= MAX_LAYERS, f"layers must be at most {MAX_LAYERS:,}, got {self.layers:,}")  # records.Shape's
        need(isinstance(self.forward_only, bool), f"forward_only must be true or false, got {_shown(self.forward_only)}")
        # --- issue 24: lm ---
        need(isinstance(self.tie_embeddings, bool),
             f"tie_embeddings must be true or false, got {_shown(self.tie_embeddings)}")
        need(not (self.vocab and self.scope == "attention"),
             f"vocab {self.vocab} needs scope model (an embedding, a head and a loss around the stack), not attention")
        need(self.vocab or self.loss_chunks == 1, f"loss_chunks {self.loss_chunks} needs a vocabulary (vocab > 0)")
        need(self.vocab or not self.tie_embeddings, "tie_embeddings needs a vocabulary (vocab > 0)")
        # --- issue 24: attention ---
        need(isinstance(self.rope, bool), f"rope must be true or false, got {_shown(self.rope)}")
        need(not self.kv_heads or not _is(self.heads, int) or self.heads % self.kv_heads == 0,
             f"kv_heads {self.kv_heads} does not divide heads {self.heads}; use a divisor of {self.heads}")
        timeout = self.point_timeout_s
        need(_is(timeout, float) or _is(timeout, int), f"point_timeout_s must be a number of seconds, got {_shown(timeout)}")
        need(math.isfinite(timeout) and 0 < timeout <= MAX_POINT_TIMEOUT_S,
             f"point_timeout_s must be a finite number of seconds, above 0 and at most {MAX_POINT_TIMEOUT_S:g} "
             f"(7 days), got {_shown(timeout)}")
        try:
            dtype = canonical_dtype(self.dtype)
        except ShapeError as exc:
            raise ScenarioError(f"scenario {where}: {exc}") from None
        # --- issue 24: block options ---
        for key, allowed in (("mlp", MLPS), ("norm", NORMS)):
            value = getattr(self, key)
            need(value in allowed, f"{key} must be one of {', '.join(allowed)}, got {_shown(value)}")
        # --- issue 24: precision ---
        problem = precision_problem(self.precision, dtype)
        need(problem is None, (problem or "").replace("--", ""))
        problem = self._size_problem(DTYPE_BYTES[dtype])
        need(problem is None, problem or "")
        # --- issue 24: optimizer ---
        need(self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {_shown(self.optimizer)}")
        need(self.optimizer_impl in OPTIMIZER_IMPLS,
             f"optimizer_impl must be one of {_IMPLS_SHOWN}, got {_shown(self.optimizer_impl)}")
        need(not (self.optimizer_impl and self.optimizer == "none"),
             f"optimizer_impl {self.optimizer_impl} needs an optimizer (--optimizer sgd | adamw)")
        need(not (self.forward_only and self.optimizer != "none"),
             f"optimizer {self.optimizer} needs a backward: leave out forward_only (--forward-only)")
        if self.tokens_per_batch:
            longest = max(self.lengths() or [0])
            need(self.tokens_per_batch >= longest,
                 f"tokens_per_batch {self.tokens_per_batch} is below the longest length {longest}: batch would be 0")

    def _size_problem(self, dtype_bytes: int) -> str | None:
        """Why some tensor of this scenario could not exist: its element count or byte size
        beyond int64 (torch's sizes, and the byte counts attnprof records, are int64)."""
        d_ff = self.ffn_dim or FF_MULT * self.d_model  # records.Shape.d_ff (swiglu: each of its two hidden tensors)
        weights = d_ff * self.d_model
        if weights * dtype_bytes > INT64_MAX:
            what = f"d_model {_power(self.d_model)}" + (f" with ffn_dim {_power(self.ffn_dim)}" if self.ffn_dim else "")
            return (f"{what} is too large: a {_power(self.d_model)}x{_power(d_ff)}"
                    f" weight overflows int64")
        for n in self.lengths():
            b = self.batch_for(n)
            scores = b * self.heads * n * n  # the dense attention scores, (B, h, n, n)
            hidden = b * n * d_ff  # the feed-forward's hidden activations (swiglu: two of them, each this size)
            if hidden > scores and hidden * dtype_bytes > INT64_MAX:  # issue 24: a wide --ffn-dim
                return (f"seq_len {n} is too long: a {b}x{n}x{_power(d_ff)} feed-forward hidden tensor "
                        f"({_power(hidden)} elements of {dtype_bytes} bytes) overflows int64")
            if max(scores, hidden) * dtype_bytes > INT64_MAX:
                return (f"seq_len {n} is too long: a {b}x{self.heads}x{n}x{n} attention score tensor "
                        f"({_power(scores)} elements of {dtype_bytes} bytes) overflows int64")
        return None

    def lengths(self) -> list[int]:
        if self.seq_lens:
            return sorted(set(int(n) for n in self.seq_lens))
        out, n = [], max(1, self.min_len)
        while n <= self.max_len:
            out.append(n)
            n *= 2
        return out

    def batch_for(self, seq_len: int) -> int:
        if self.tokens_per_batch:
            return max(1, self.tokens_per_batch // seq_len)
        return self.batch

    def override(self, **values) -> "Scenario":
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


@functools.cache
def _kind(kind: str) -> tuple[str, ...]:
    """The Scenario fields of one kind, in Scenario's order (text: name, description and source too)."""
    names = set(names_of(kind)) | ({"name", "description", "source"} if kind == "text" else set())
    return tuple(f.name for f in fields(Scenario) if f.name in names)


_LIST_WANTED = {"variants": 'an array of strings like ["lsh[n_hashes=4]"]', "modes": 'an array of strings like ["plain"]',
                "seq_lens": "an array of positive integers like [1024, 4096]"}


def _is(value, kind: type) -> bool:
    """isinstance, except that true/false is neither an integer nor a number here."""
    return isinstance(value, kind) and not isinstance(value, bool)


def _shown(value) -> str:
    """A bad value, briefly, in TOML's words where its Python repr would mislead."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        return "an array of tables"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int) and abs(value) > 10**12:
        return _power(value)
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _power(value: int) -> str:
    """A big integer as 'about 2**80' (its exact digits would not help anyone)."""
    if abs(value) <= 10**12:
        return str(value)
    exp = abs(value).bit_length() - 1
    sign = "-" if value < 0 else ""
    return f"{sign}2**{exp}" if abs(value) == 1 << exp else f"about {sign}2**{exp}"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.toml"))


def _resolve(name_or_path) -> Path:
    """The file a --scenario value names: a built-in preset by name, else a path."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ScenarioError(f"a scenario is a preset name or a file path, got {_shown(name_or_path)}")
    text = os.fspath(name_or_path)
    if isinstance(text, bytes) or not text.strip():
        raise ScenarioError(f"empty scenario name; built-in: {', '.join(preset_names())}")
    if "\x00" in text:
        raise ScenarioError("scenario path contains a NUL character")
    path = Path(text)
    try:
        if not path.suffix and not path.is_file() and _PRESET_NAME.match(text):
            preset = PRESETS / f"{text}.toml"
            if preset.is_file():
                return preset
            if not path.exists():
                raise ScenarioError(f"unknown scenario {text!r}; built-in: {', '.join(preset_names())}")
        if not path.exists():
            raise ScenarioError(f"scenario file not found: {_shown(text)}")
        if path.is_dir():
            raise ScenarioError(f"scenario {_shown(text)} is a directory, not a TOML file")
        if not path.is_file():
            raise ScenarioError(f"scenario {_shown(text)} is not a regular file")
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {_shown(text)}: {exc.strerror or exc}") from None
    return path


def _read_toml(path: Path) -> dict:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScenarioError(f"scenario {path.name} is {size} bytes; a scenario file is a short TOML text "
                                f"(at most {MAX_FILE_BYTES} bytes)")
        raw = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path.name}: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise ScenarioError(f"scenario {path.name} is a binary file, not TOML text")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"scenario {path.name} is not UTF-8 text "
                            f"(byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ScenarioError(f"scenario {path.name} is not valid TOML: arrays or tables nested too deeply") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError, and a value tomllib cannot build
        raise ScenarioError(f"scenario {path.name} is not valid TOML: {' '.join(str(exc).split())}") from None


def load_scenario(name_or_path) -> Scenario:
    path = _resolve(name_or_path)
    data = _read_toml(path)
    known = {f.name for f in fields(Scenario)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"scenario {path.name}: unknown key {_shown(unknown[0])}; known: {', '.join(sorted(known))}")
    data.setdefault("name", path.stem)
    data.setdefault("source", str(path))
    return Scenario(**data)
