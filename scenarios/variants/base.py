"""The contract every attention variant keeps, and the typed options it can take.

A variant is an ``nn.Module`` mapping x [batch, seq, d_model] to [batch, seq, d_model]
through its own projections. Its *core* (projected q, k, v -> output, no projections)
is callable on its own, because attnprof profiles that scope too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import nn
from attnprof.errors import UserError
from attnprof.profiler.units import INT64_MAX


class VariantError(UserError):
    """A variant or option the user asked for cannot be built; the message is one line."""


@dataclass(frozen=True)
class Option:
    """One typed option of a variant, e.g. LSH ``n_hashes``."""

    type: type  # int, float, bool or str
    default: Any  # None means "chosen from the sequence length" (see the variant)
    help: str
    check: Optional[Callable[[Any], Optional[str]]] = None  # returns an error text, or None

    def coerce(self, name: str, raw: Any) -> Any:
        if isinstance(raw, str):
            text = raw.strip()
            try:
                if self.type is bool:
                    lowered = text.lower()
                    if lowered not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError
                    value = lowered in ("true", "1", "yes")
                else:
                    value = self.type(text)
            except ValueError:
                raise VariantError(f"option {name}={_brief(raw)} is not {_a(self.type)}") from None
        else:
            value = raw
            if self.type is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
                raise VariantError(f"option {name}={_brief(raw)} is not {_a(self.type)}")
        if self.type is float and not math.isfinite(value):
            raise VariantError(f"option {name}={_brief(raw)} is not a finite number")
        if self.type is int and not -INT64_MAX <= value <= INT64_MAX:
            raise VariantError(f"option {name}={_brief(raw)} does not fit in int64")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise VariantError(f"option {name}={value!r}: {problem}")
        return value


def _brief(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _a(kind: type) -> str:
    name = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
    return name.get(kind.__name__, f"a {kind.__name__}")


def positive(value) -> Optional[str]:
    return None if value > 0 else "must be positive"


def power_of_two(value) -> Optional[str]:
    return None if value > 0 and value & (value - 1) == 0 else "must be a positive power of two"


def mask_value(dtype: torch.dtype) -> float:
    """A finite 'minus infinity': -inf turns a fully masked row into NaN, and the
    dtype's own minimum keeps fp16/bf16 finite too (lucidrains' max_neg_value)."""
    return torch.finfo(dtype).min


class Attention(nn.Module):
    """Base of all variants: projections, head split/merge, and the option machinery."""

    name: ClassVar[str] = ""  # set by @register_variant
    description: ClassVar[str] = ""  # one line for `attnprof variants`
    paper: ClassVar[str] = ""  # citation (title, arXiv id)
    shared_qk: ClassVar[bool] = False  # Reformer: keys are the (normalised) queries
    # Expected log-log slopes in n at scope `attention` with default options: (memory, time).
    complexity: ClassVar[tuple[float, float]] = (2.0, 2.0)
    OPTIONS: ClassVar[dict[str, Option]] = {
        "causal": Option(bool, True, "mask future positions (autoregressive); false = bidirectional"),
    }

    def __init__(self, d_model: int, heads: int, *, layer_index: int = 0, **options):
        super().__init__()
        if d_model % heads:
            raise VariantError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.layer_index = layer_index  # position in the stack (Sparse Transformer interleaving)
        self.options = self.resolve_options(options)
        for key, value in self.options.items():
            setattr(self, key, value)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        n_in = 2 if self.shared_qk else 3
        self.to_in = nn.Linear(d_model, n_in * d_model, bias=False)
        self.to_out = nn.Linear(d_model, d_model, bias=False)

    @classmethod
    def resolve_options(cls, given: dict) -> dict:
        unknown = sorted(set(given) - set(cls.OPTIONS))
        if unknown:
            raise VariantError(
                f"{cls.name or cls.__name__} has no option {unknown[0]!r}; valid options: {cls.options_help()}"
            )
        try:
            return {key: (opt.coerce(key, given[key]) if key in given else opt.default)
                    for key, opt in cls.OPTIONS.items()}
        except VariantError as exc:
            raise VariantError(f"{cls.name or cls.__name__}: {exc}; valid options: {cls.options_help()}") from None

    @classmethod
    def options_help(cls) -> str:
        return ", ".join(f"{k} ({o.type.__name__}, default {o.default})" for k, o in cls.OPTIONS.items())

    @classmethod
    def check_shape(cls, options: dict, seq_len: int, heads: int, head_dim: int) -> None:
        """Raise VariantError if these options cannot run at this shape (override)."""

    @classmethod
    def layer_period(cls, options: dict) -> int:
        """After how many blocks the stack repeats itself (override when a variant's
        behaviour depends on ``layer_index``): the predictor extrapolates over depth in
        steps of this many layers."""
        return 1

    def core_parameters(self) -> list:
        """The parameters ``core`` itself uses (talking heads' mixing matrices); not the
        projections, which scope ``attention`` leaves out."""
        projections = {id(p) for m in (self.to_in, self.to_out) for p in m.parameters()}
        return [p for p in self.parameters() if id(p) not in projections]

    # --- the module -------------------------------------------------------------------
    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)  # (B, h, n, dh)

    def project(self, x: torch.Tensor):
        """x (B, n, d_model) -> q, k, v each (B, h, n, dh); k is q when shared_qk."""
        parts = self.to_in(x).chunk(2 if self.shared_qk else 3, dim=-1)  # each (B, n, d_model)
        if self.shared_qk:
            qk, v = (self.split_heads(p) for p in parts)
            return qk, qk, v
        return tuple(self.split_heads(p) for p in parts)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(B, h, n, dh) x3 -> (B, h, n, dh). The attention itself; override."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        out = self.core(*self.project(x))  # (B, h, n, dh)
        out = out.transpose(1, 2).reshape(b, n, self.d_model)  # (B, n, d_model)
        return self.to_out(out)


def causal_mask(n_q: int, n_k: int, device) -> torch.Tensor:
    """(n_q, n_k) bool, True where key j is in the future of query i (to be masked)."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j > i
