"""The shape of one profiled point: everything but the variant, the mode and the scope."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
DTYPE_ALIASES = {"fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


class ShapeError(ValueError):
    """A shape that cannot be built; the message is one line, meant for the user."""


def canonical_dtype(name: str) -> str:
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ShapeError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True)
class Shape:
    batch: int = 1  # sequences per step
    seq_len: int = 1024  # tokens per sequence (n)
    d_model: int = 256  # model width; head_dim = d_model // heads
    heads: int = 4  # attention heads (h)
    layers: int = 1  # transformer blocks (L); scope `attention` ignores it
    dtype: str = "float32"  # a key of DTYPES
    ff_mult: int = 4  # d_ff = ff_mult * d_model (Vaswani 2017)
    ff_chunks: int = 1  # >1: feed-forward applied in sequence chunks (Reformer §3)

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        for field in ("batch", "seq_len", "d_model", "heads", "layers", "ff_mult", "ff_chunks"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ShapeError(f"{field} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ShapeError(f"d_model {self.d_model} is not divisible by heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def with_len(self, seq_len: int) -> "Shape":
        return replace(self, seq_len=seq_len)

    def to_dict(self) -> dict:
        return {**asdict(self), "head_dim": self.head_dim}
