"""Scenarios as data: a TOML file names the variants, modes, lengths and shape of a sweep.

Built-in files live in ``scenarios/presets/``; ``--scenario NAME`` finds them there,
``--scenario PATH`` reads any file. Command-line flags override the file's values.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from attnprof.errors import UserError

PRESETS = Path(__file__).parent / "presets"


class ScenarioError(UserError):
    """A scenario that cannot be loaded; the message is one line."""


@dataclass(frozen=True)
class Scenario:
    name: str = "default"
    description: str = ""
    variants: tuple = ()  # labels, e.g. "lsh[n_hashes=4]"; empty = every registered variant
    modes: tuple = ("plain", "checkpoint", "reversible")  # scope model only
    scope: str = "model"
    seq_lens: tuple = ()  # explicit lengths; empty = powers of two from min_len to max_len
    min_len: int = 256
    max_len: int = 4096
    batch: int = 1
    tokens_per_batch: int = 0  # >0: batch = tokens_per_batch // seq_len (Reformer Fig. 5)
    d_model: int = 256
    heads: int = 4
    layers: int = 2
    dtype: str = "float32"
    ff_chunks: int = 1
    forward_only: bool = False
    repeats: int = 3
    warmup: int = 1
    point_timeout_s: float = 300.0
    source: str = ""  # the file it came from

    def __post_init__(self):
        """Every value checked once, whether it came from a file, a flag or code."""
        def need(ok: bool, text: str) -> None:
            if not ok:
                raise ScenarioError(f"scenario {self.name}: {text}")

        def positive_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v > 0

        for key in ("min_len", "max_len", "batch", "d_model", "heads", "layers", "ff_chunks", "repeats"):
            need(positive_int(getattr(self, key)), f"{key} must be a positive integer, got {getattr(self, key)!r}")
        need(all(positive_int(n) for n in self.seq_lens), f"seq_lens must be positive integers, got {list(self.seq_lens)}")
        need(isinstance(self.warmup, int) and self.warmup >= 0, f"warmup must be >= 0, got {self.warmup!r}")
        need(isinstance(self.point_timeout_s, (int, float)) and self.point_timeout_s > 0,
             f"point_timeout_s must be positive, got {self.point_timeout_s!r}")
        need(isinstance(self.tokens_per_batch, int) and self.tokens_per_batch >= 0,
             f"tokens_per_batch must be >= 0, got {self.tokens_per_batch!r}")
        if self.tokens_per_batch:
            longest = max(self.lengths() or [0])
            need(self.tokens_per_batch >= longest,
                 f"tokens_per_batch {self.tokens_per_batch} is below the longest length {longest}: batch would be 0")
        need(all(isinstance(v, str) for v in self.variants), "variants must be strings like \"lsh[n_hashes=4]\"")
        need(all(isinstance(m, str) for m in self.modes), "modes must be strings")

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


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.toml"))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = PRESETS / f"{name_or_path}.toml"
        if not path.exists():
            raise ScenarioError(f"unknown scenario {name_or_path!r}; built-in: {', '.join(preset_names())}")
    if not path.exists():
        raise ScenarioError(f"scenario file not found: {name_or_path}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"scenario {path} is not valid TOML: {exc}") from None
    known = {f.name for f in fields(Scenario)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"scenario {path.name}: unknown key {unknown[0]!r}; known: {', '.join(sorted(known))}")
    data.setdefault("name", path.stem)
    for key in ("variants", "modes", "seq_lens"):
        if key in data:
            data[key] = tuple(data[key])
    defaults = Scenario()
    for key, value in data.items():
        expected = type(getattr(defaults, key))
        if expected is float and isinstance(value, int):
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ScenarioError(f"scenario {path.name}: {key} must be {expected.__name__}, got {value!r}")
    return Scenario(**{**data, "source": data.get("source", str(path))})
