"""The gate's one error: why a run cannot be gated (exit 2)."""

from __future__ import annotations

from attnprof.errors import UserError
from attnprof.profiler.units import printable


class GateError(UserError):
    """Why a run cannot be gated (exit 2). Always one line: the CLI prints ``error: <msg>``."""

    def __init__(self, message: str):
        super().__init__(printable(message))  # a name it quotes keeps its characters, spelled out
