"""A Chrome trace-event file of a predicted step (the JSON object format: ``traceEvents``
and ``otherData``), opened by ui.perfetto.dev and chrome://tracing.

One thread of slices ("X", microseconds): the phases (setup, forward, backward, and any
pass the marks name), in them the layer periods ("blocks.3"), in those the ops, each as
long as the time model says, end to end (they sum to the predicted step time). A counter
track ("C") of live bytes by category after every allocation and free (the allocator's
block bytes: with --gpu its allocated bytes, else the tensors'), with --gpu a second one
of reserved bytes; an instant event ("i") at the peak, naming its op.

A large step stays usable: past ``MAX_OP_SLICES`` ops, runs of adjacent ops in one layer
shorter than a threshold are merged into one slice ("N ops"); ``otherData`` says how
many and below what duration. Names from the user are spelled out (``units.printable``).
"""

from __future__ import annotations

import json

from attnprof.profiler.timeline.build import Timeline
from attnprof.profiler.timeline.memory_snapshot import SOURCES
from attnprof.profiler.timeline.steps import phase_name
from attnprof.profiler.units import fmt_bytes, printable

MAX_OP_SLICES = 200_000  # ~25 MB of op slices; above it small ops are merged
PID, TID_STEPS, TID_MEMORY = 1, 1, 2
LIVE_COUNTER, RESERVED_COUNTER = "live bytes", "reserved bytes"


def _slice(name: str, cat: str, start: float, end: float, args: dict | None = None) -> dict:
    out = {"name": name, "cat": cat, "ph": "X", "ts": start, "dur": end - start, "pid": PID, "tid": TID_STEPS}
    if args:
        out["args"] = args
    return out


def _spans(ops: list, key) -> list:
    """(key, first index, last index) of each run of adjacent ops with the same key."""
    out = []
    for j, op in enumerate(ops):
        k = key(op)
        if out and out[-1][0] == k:
            out[-1][2] = j
        else:
            out.append([k, j, j])
    return out


def _op_slices(timeline: Timeline, max_slices: int) -> tuple:
    """The op slices, merged where there are more than ``max_slices``; (slices, merged ops,
    threshold us)."""
    ops = timeline.steps.ops
    threshold = 0.0
    if len(ops) > max_slices:
        durations = sorted(op.dur_us for op in ops)
        threshold = durations[len(ops) - max_slices // 2]  # merge below it: at most half stay apart
    out, merged, j = [], 0, 0
    while j < len(ops):
        op = ops[j]
        k = j
        if op.dur_us < threshold:
            while k + 1 < len(ops) and ops[k + 1].dur_us < threshold and ops[k + 1].run == op.run:
                k += 1
        if k == j and op.dur_us == 0:
            pass  # a view: no kernel, no slice (its events still fall in it)
        elif k > j:
            out.append(_slice(f"{k - j + 1} ops", "ops (merged)", op.start_us, ops[k].start_us + ops[k].dur_us,
                              {"ops": k - j + 1, "below_us": threshold}))
            merged += k - j + 1
        else:
            out.append(_slice(printable(op.name), "op", op.start_us, op.start_us + op.dur_us,
                              {"flops": op.flops, "pass": op.pass_}))
        j = k + 1
    return out, merged, threshold


def trace_events(timeline: Timeline, max_slices: int = MAX_OP_SLICES) -> dict:
    """The trace-event JSON object of ``timeline``."""
    t, steps = timeline, timeline.steps
    ops = steps.ops
    label = printable(t.point.variant) + (f" on {printable(t.gpu.label)}" if t.gpu is not None else "")
    events = [{"name": "process_name", "ph": "M", "pid": PID, "args": {"name": f"attnprof predicted: {label}"}},
              {"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_STEPS, "args": {"name": "ops (modelled time)"}},
              {"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_MEMORY, "args": {"name": "memory"}}]
    for pass_, a, b in _spans(ops, lambda op: op.run[0]):
        events.append(_slice(phase_name(pass_), "phase", ops[a].start_us, ops[b].start_us + ops[b].dur_us))
    for run, a, b in _spans(ops, lambda op: op.run):
        path = steps.module_path(run)
        if path:
            events.append(_slice(path, "layer", ops[a].start_us, ops[b].start_us + ops[b].dur_us))
    slices, merged, threshold = _op_slices(t, max_slices)
    events += slices
    live: dict = {}
    reserved = now = peak = 0
    peak_at = None
    for act in t.allocations.actions:
        ts = t.time_us[act.at]
        if act.action in ("alloc", "free_completed"):
            sign = 1 if act.action == "alloc" else -1
            live[act.category] = live.get(act.category, 0) + sign * act.size
            now += sign * act.size
            events.append({"name": LIVE_COUNTER, "ph": "C", "ts": ts, "pid": PID, "args": dict(live)})
            if now > peak:
                peak, peak_at = now, act
        elif t.gpu is not None and act.action in ("segment_alloc", "segment_free"):
            reserved += act.size if act.action == "segment_alloc" else -act.size
            events.append({"name": RESERVED_COUNTER, "ph": "C", "ts": ts, "pid": PID, "args": {"reserved": reserved}})
    if peak_at is not None:
        j = t.op_of[peak_at.at]
        op = ops[j].name if j >= 0 else "(registered before the step)"
        events.append({"name": f"peak {fmt_bytes(peak)} at {printable(op)}", "ph": "i", "s": "g",
                       "ts": t.time_us[peak_at.at], "pid": PID, "tid": TID_MEMORY,
                       "args": {"bytes": peak, "op": printable(op),
                                "module": printable(t.module_of[peak_at.at] or steps.module_path(t.run_of[peak_at.at])),
                                "phase": phase_name(t.run_of[peak_at.at][0])}})
    other = {"attnprof_predicted": True, "point": label, "key": printable(t.point.key_text()),
             "memory": SOURCES[t.allocations.source], "peak_bytes": peak, "step_us": steps.step_us,
             "time_model": printable(steps.device) if steps.timed else "none",
             "ops": len(ops), "merged_ops": merged, "notes": [printable(n) for n in t.notes]}
    if merged:
        other["merged"] = f"{merged} ops shorter than {threshold:.3f} us merged into slices per layer"
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def dumps(trace: dict) -> bytes:
    return json.dumps(trace, separators=(",", ":"), allow_nan=False).encode("utf-8")
