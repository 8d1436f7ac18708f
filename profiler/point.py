"""What one profiled point is: variant (label), mode, scope and shape."""

from __future__ import annotations

import json
from dataclasses import dataclass

from attnprof.scenarios.shape import Shape
from attnprof.scenarios.stack import MODES, SCOPES

NO_MODE = "none"  # the mode recorded at scope `attention`, where modes do not apply


@dataclass(frozen=True)
class Point:
    variant: str  # a variant label, e.g. "lsh[n_hashes=8]"
    mode: str  # one of MODES at scope "model"; NO_MODE at scope "attention"
    scope: str  # "model" (the stack) or "attention" (the core alone)
    shape: Shape
    forward_only: bool = False

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}; choose one of {', '.join(SCOPES)}")
        if self.scope == "attention":
            object.__setattr__(self, "mode", NO_MODE)
        elif self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")

    def key(self) -> tuple:
        """Identity of the point in results, resume and the gate."""
        s = self.shape
        return (self.variant, self.mode, self.scope, s.seq_len, s.batch, s.d_model, s.heads,
                s.layers, s.dtype, s.ff_mult, s.ff_chunks, self.forward_only)

    def key_text(self) -> str:
        """key() as a string: the key of the report's prediction cache."""
        return json.dumps(self.key())

    def identity(self) -> dict:
        """The identity fields of a result record (flat; units in names)."""
        return {"variant": self.variant, "mode": self.mode, "scope": self.scope,
                "forward_only": self.forward_only, **self.shape.to_dict()}


def key_of_record(record: dict) -> tuple:
    """The same key as Point.key(), read back from a result record."""
    return tuple(record.get(f) for f in ("variant", "mode", "scope", "seq_len", "batch", "d_model", "heads",
                                          "layers", "dtype", "ff_mult", "ff_chunks", "forward_only"))
