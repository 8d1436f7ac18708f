"""A point's ops laid end to end in modelled time: the time model's duration of each op
(timemodel/roofline.op_time_s, so the ops sum to the predicted step time), the pass and
the layer period each runs in (the period marks of measure/drive.py), and for every event
of the trace the op it happens in.

The phases are data: whatever passes the marks name (measure/drive.py ``PASSES``; a pass
added there shows up here), named for people by ``PHASE_NAMES`` where it has a name.
Without marks (scope attention, a stack that is not a stack of blocks) an event's pass is
forward before backward started and backward after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.measure.drive import MARK_LABEL, PROLOGUE, Traced
from attnprof.profiler.measure.tracker import MARK, OP
from attnprof.profiler.timemodel.rates import Rates
from attnprof.profiler.timemodel.roofline import op_time_s

PHASE_NAMES = {"param": "setup", "fwd": "forward", "bwd": "backward", "step": "optimizer.step"}
UNTIMED_OP_US = 1.0  # each op's width when no time model is at hand (said in the files)


def phase_name(pass_: str) -> str:
    return PHASE_NAMES.get(pass_, str(pass_))


@dataclass
class Op:
    """One op that costs something (a row of the time model), placed in time."""

    at: int  # its position in the trace
    name: str  # the aten overload ("mm.default"); "(no output)" for FLOPs without an OP event
    pass_: str  # the time model's pass: "fwd" | "bwd"
    run: tuple  # (pass, period) of the marks; period None without marks, PROLOGUE before the first
    start_us: float = 0.0
    dur_us: float = 0.0
    flops: int = 0


@dataclass
class Steps:
    """The ops of one point in order, and where each trace event falls."""

    ops: list  # [Op], in trace order, laid end to end from 0
    op_of: list  # trace position -> index into ops of the op it happens in (-1: before the first)
    run_of: list  # trace position -> (pass, period) it happens in
    timed: bool  # durations from the time model (else UNTIMED_OP_US each)
    device: str  # the time model's device ("" when untimed)
    period: int  # layers per period (module paths)
    notes: list = field(default_factory=list)

    @property
    def step_us(self) -> float:
        return sum(op.dur_us for op in self.ops)

    def module_path(self, run: tuple) -> str:
        """'blocks.3' for period 3 of a one-layer period, 'blocks.4-5' for a two-layer one;
        '' before the blocks, after them (a pass's epilogue) or without marks."""
        k = run[1]
        if k is None or k < 0:  # PROLOGUE, EPILOGUE
            return ""
        if self.period == 1:
            return f"blocks.{k}"
        return f"blocks.{k * self.period}-{k * self.period + self.period - 1}"


def runs_of(events: list, backward_at: int) -> list:
    """(pass, period) of each event: from the period marks; without any, forward/backward
    by position."""
    marked = any(e[0] == MARK and isinstance(e[1], tuple) and e[1][:1] == (MARK_LABEL,) for e in events)
    out, current = [], ("param", PROLOGUE) if marked else ("fwd", None)
    for i, e in enumerate(events):
        if marked and e[0] == MARK and isinstance(e[1], tuple) and e[1][:1] == (MARK_LABEL,):
            current = (e[1][1], e[1][2])
        elif not marked and i >= backward_at:
            current = ("bwd", None)
        out.append(current)
    return out


def lay_out(traced: Traced, rates: Optional[Rates], period: int = 1) -> Steps:
    """The ops of ``traced`` end to end, each as long as the time model says on ``rates``'
    device (None: UNTIMED_OP_US each, and a note)."""
    shape = traced.point.shape
    run_of = runs_of(traced.trace, traced.backward_at)
    ops, notes, timed = [], [], rates is not None
    for at, pass_, name, flops, read, written in traced.op_rows():
        if not (flops or read or written):
            continue  # costs nothing, launches no kernel: not in the time model's rows either
        dur_s = (op_time_s(pass_, name, flops, read, written, rates, shape.compute_dtype, shape.head_dim)
                 if rates is not None else None)
        if dur_s is None and timed:
            timed = False
            notes.append(f"no step time on {rates.device} for this point: {UNTIMED_OP_US:g} us per op")
        run = run_of[at] if at < len(run_of) else run_of[-1] if run_of else (pass_, None)
        ops.append(Op(at, name if name is not None else "(no output)", pass_, run, 0.0,
                      dur_s * 1e6 if dur_s is not None else UNTIMED_OP_US, flops))
    if not timed:
        for op in ops:
            op.dur_us = UNTIMED_OP_US
        if rates is None:
            notes.append(f"no time model at hand (run `attnprof calibrate`): {UNTIMED_OP_US:g} us per op")
    t = 0.0
    for op in ops:
        op.start_us = t
        t += op.dur_us
    op_of, j = [], -1
    for i in range(len(traced.trace)):
        while j + 1 < len(ops) and ops[j + 1].at <= i:
            j += 1
        op_of.append(j)
    return Steps(ops, op_of, run_of, timed, rates.device if timed else "", period, notes)


def event_times(op_of: list, kinds: list, steps: Steps) -> list:
    """A time (us) for each event whose kind is truthy in ``kinds``: the events inside one
    op spread evenly over its duration, in order (setup events, before any op, at 0)."""
    groups: dict = {}
    for i, k in enumerate(kinds):
        if k:
            groups.setdefault(op_of[i], []).append(i)
    times = [0.0] * len(kinds)
    for j, members in groups.items():
        if j < 0:
            continue
        op = steps.ops[j]
        for r, i in enumerate(members):
            times[i] = op.start_us + op.dur_us * (r + 1) / (len(members) + 1)
    return times


def op_ordinals(events: list) -> list:
    """For each event, how many OP events came before it or are it (1-based; 0 before the first)."""
    out, n = [], 0
    for e in events:
        if e[0] == OP:
            n += 1
        out.append(n)
    return out
