"""What torch.autocast kept in float32, as traced (issue 24): op -> the dtypes of what it made.

Which ops autocast runs in low precision, which in float32 and which it leaves to type
promotion is the running torch's own lists (per device type: CPU and CUDA differ), so it is
read off a traced point, never written down: every storage the tracker counted names the
op that made it and its dtype (``Traced.origins``). ``output_dtypes`` groups them per pass
and op; ``kept_in_float32`` lists the ops of an autocast point that still made float32
outputs (docs/accounting.md, "What autocast kept in float32").
"""

from __future__ import annotations

from attnprof.profiler.measure.drive import Traced, trace_point
from attnprof.profiler.measure.tracker import ALLOC
from attnprof.profiler.records import Point


def output_dtypes(traced: Traced) -> dict:
    """{(pass, op): sorted dtype names of the storages it made}, pass "fwd" or "bwd"; storages
    registered before the run (parameters, inputs: op "") are left out."""
    found: dict = {}
    for at, event in enumerate(traced.trace):
        if event[0] != ALLOC or not event[3]:
            continue
        _, _, dtype = traced.origins[event[1]]
        found.setdefault(("bwd" if at >= traced.backward_at else "fwd", event[3]), set()).add(dtype)
    return {key: sorted(dtypes) for key, dtypes in sorted(found.items())}


def kept_in_float32(point: Point) -> list:
    """[(pass, op)] of a traced run of ``point`` whose outputs include float32: under autocast,
    what it kept in (or promoted to) float32."""
    return [key for key, dtypes in output_dtypes(trace_point(point)).items() if "float32" in dtypes]


def dtype_table(point: Point) -> str:
    """``output_dtypes`` of a traced run of ``point`` as a Markdown table (for the docs)."""
    rows = ["| pass | op | output dtypes |", "|---|---|---|"]
    rows += [f"| {p} | `{op}` | {', '.join(dtypes)} |" for (p, op), dtypes in output_dtypes(trace_point(point)).items()]
    return "\n".join(rows)
