"""The contract every attention variant keeps, and the typed options it can take.

A variant is an ``nn.Module`` mapping x [batch, seq, d_model] to [batch, seq, d_model]
through its own projections. Its *core* (projected q, k, v -> output, no projections)
is callable on its own, because attnprof profiles that scope too.

Grouped KV heads and RoPE (issue 24) live here, once, for every variant: ``attend`` is
what runs between the projections and the output at both scopes. It rotates q and k
(``rope.py``; scope attention too, on the given q and k: the rotation sits after the
projection and before the core, so it belongs to the attention), then, for a variant
that does not declare ``native_gqa``, repeats the K/V heads to the query heads as users'
code does (``repeat_kv``), then calls ``core``. A variant's ``core`` therefore always sees
as many K/V heads as query heads unless it says it takes fewer (SDPA's ``enable_gqa``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import nn
from attnprof.errors import UserError
from attnprof.profiler.units import INT64_MAX
from attnprof.scenarios.variants.rope import rotate_qk


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


def probability(value) -> Optional[str]:
    return None if 0.0 <= value < 1.0 else "must be in [0, 1)"


# Attention dropout on the probabilities (Vaswani et al. 2017, §5.4; BERT, GPT-2). One
# Option for every variant that takes it (catalog.py reads it by name, without torch).
DROPOUT = Option(float, 0.0, "dropout probability on the attention weights while training (0 = none)",
                 check=probability)


def repeat_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, K, n, dh) -> (B, K*groups, n, dh), each K/V head repeated for its group of query
    heads: Llama's ``repeat_kv`` (expand, then reshape: one copy of the repeated tensor).

    Ainslie et al. 2023, "GQA", arXiv 2305.13245; Shazeer 2019, "Fast Transformer Decoding:
    One Write-Head is All You Need" (multi-query, groups = heads), arXiv 1911.02150."""
    if groups == 1:
        return t
    b, k, n, dh = t.shape
    return t[:, :, None].expand(b, k, groups, n, dh).reshape(b, k * groups, n, dh)  # (B, h, n, dh)


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
    # core takes k, v with fewer heads than q itself (SDPA's enable_gqa); else attend repeats them
    native_gqa: ClassVar[bool] = False
    # Expected log-log slopes in n at scope `attention` with default options: (memory, time).
    complexity: ClassVar[tuple[float, float]] = (2.0, 2.0)
    OPTIONS: ClassVar[dict[str, Option]] = {
        "causal": Option(bool, True, "mask future positions (autoregressive); false = bidirectional"),
    }

    def __init__(self, d_model: int, heads: int, *, layer_index: int = 0, kv_heads: int = 0, rope: bool = False,
                 **options):
        super().__init__()
        if d_model % heads:
            raise VariantError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.check_heads(heads, kv_heads, self.head_dim, rope)
        self.kv_heads = kv_heads or heads  # K/V heads (issue 24): a divisor of heads
        self.rope = rope  # rotary position embedding on q and k (rope.py)
        self.layer_index = layer_index  # position in the stack (Sparse Transformer interleaving)
        self.options = self.resolve_options(options)
        for key, value in self.options.items():
            setattr(self, key, value)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # q (d_model wide), then k and v (kv_heads * head_dim each); shared QK: qk and v
        self.kv_width = self.kv_heads * self.head_dim
        n_in = 2 * d_model if self.shared_qk else d_model + 2 * self.kv_width
        self.to_in = nn.Linear(d_model, n_in, bias=False)
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
    def check_heads(cls, heads: int, kv_heads: int, head_dim: int, rope: bool = False) -> None:
        """Raise VariantError if this variant cannot have ``kv_heads`` K/V heads (0 = heads)
        or RoPE at this width (issue 24)."""
        name = cls.name or cls.__name__
        if kv_heads < 0 or (kv_heads and heads % kv_heads):
            raise VariantError(f"{name}: kv_heads {kv_heads} does not divide heads {heads}; use a divisor of {heads}")
        if cls.shared_qk and kv_heads and kv_heads != heads:
            raise VariantError(f"{name} shares one tensor for queries and keys, so its keys have as many heads as "
                               f"its queries: kv_heads {kv_heads} != heads {heads} is impossible; leave --kv-heads out")
        if rope and head_dim % 2:
            raise VariantError(f"{name}: rope rotates channel pairs, head_dim {head_dim} must be even")

    @classmethod
    def kv_repeat(cls, heads: int, kv_heads: int) -> str:
        """How K/V reach the query heads: "" (as many heads), "repeat" (``repeat_kv``), or
        what a variant with ``native_gqa`` says (SDPA: "enable_gqa" where torch has it)."""
        return "" if not kv_heads or kv_heads == heads else "repeat"

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

    def split_kv_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, K, n, dh)

    def project(self, x: torch.Tensor):
        """x (B, n, d_model) -> q (B, h, n, dh), k, v (B, K, n, dh); k is q when shared_qk."""
        if self.shared_qk:
            qk, v = (self.split_heads(p) for p in self.to_in(x).chunk(2, dim=-1))  # each (B, h, n, dh)
            return qk, qk, v
        if self.kv_heads == self.heads:  # multi-head: three equal chunks, as before issue 24
            return tuple(self.split_heads(p) for p in self.to_in(x).chunk(3, dim=-1))
        q, k, v = self.to_in(x).split([self.d_model, self.kv_width, self.kv_width], dim=-1)
        return self.split_heads(q), self.split_kv_heads(k), self.split_kv_heads(v)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, h, n, dh), k, v (B, K, n, dh) -> (B, h, n, dh): RoPE on q and k (when on),
        K/V repeated to h heads (unless ``native_gqa``), then ``core``. What both scopes run."""
        if self.rope:
            q, k = rotate_qk(q, k)  # shared QK (k is q): the one tensor, rotated once
        if k.shape[1] != q.shape[1] and not self.native_gqa:
            groups = q.shape[1] // k.shape[1]
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # each (B, h, n, dh)
        return self.core(q, k, v)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(B, h, n, dh) x3 -> (B, h, n, dh). The attention itself; override."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        out = self.attend(*self.project(x))  # (B, h, n, dh)
        out = out.transpose(1, 2).reshape(b, n, self.d_model)  # (B, n, d_model)
        return self.to_out(out)


def causal_mask(n_q: int, n_k: int, device) -> torch.Tensor:
    """(n_q, n_k) bool, True where key j is in the future of query i (to be masked)."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j > i
