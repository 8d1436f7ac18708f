"""A predicted memory snapshot beside a real one (``attnprof compare-timelines``): how
many allocations each made, their allocated and reserved peaks, and the first allocation
or free where they part, with the op each names.

Both are read as plain data (plain_pickle.py). Addresses differ between a prediction and
a GPU by nature, so events are compared by what they do: (action, size) of each alloc and
free_completed, in order. A real trace may start late (a ring buffer): the peaks are
replayed from the state the trace must have started in (the segments at dump time less
what the trace did).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from attnprof.profiler.timeline.plain_pickle import SnapshotRefused
from attnprof.profiler.units import INT64_MAX, fmt_bytes, printable, short_number

COMPARED = ("alloc", "free_completed")


@dataclass
class Summary:
    allocs: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    events: list  # the compared entries, in order


@dataclass
class Comparison:
    predicted: Summary
    real: Summary
    first_difference: Optional[int]  # index into the compared events; None: the same
    predicted_event: Optional[dict]
    real_event: Optional[dict]

    def to_dict(self) -> dict:
        side = lambda s: {"allocs": s.allocs, "allocated_peak_bytes": s.allocated_peak_bytes,
                          "reserved_peak_bytes": s.reserved_peak_bytes, "events": len(s.events)}
        return {"predicted": side(self.predicted), "real": side(self.real), "first_difference": self.first_difference,
                "predicted_event": _describe(self.predicted_event), "real_event": _describe(self.real_event)}

    def text(self) -> str:
        p, r = self.predicted, self.real
        lines = [f"{'':22}{'predicted':>16}{'real':>16}",
                 f"{'allocations':22}{p.allocs:>16}{r.allocs:>16}",
                 f"{'allocated peak':22}{fmt_bytes(p.allocated_peak_bytes):>16}{fmt_bytes(r.allocated_peak_bytes):>16}",
                 f"{'reserved peak':22}{fmt_bytes(p.reserved_peak_bytes):>16}{fmt_bytes(r.reserved_peak_bytes):>16}"]
        if self.first_difference is None:
            lines.append(f"the {len(p.events)} allocations and frees agree, in order, size by size")
        else:
            lines.append(f"first difference at event {self.first_difference} (allocations and frees, in order):")
            lines.append(f"  predicted: {_describe(self.predicted_event)}")
            lines.append(f"  real:      {_describe(self.real_event)}")
        return "\n".join(lines)


def _describe(entry: Optional[dict]) -> str:
    if entry is None:
        return "(none: the trace ended)"
    frames = entry.get("frames") if isinstance(entry.get("frames"), list) else []
    where = "; ".join(f"{f.get('filename', '')}:{f.get('line', '')}:{f.get('name', '')}"
                      for f in frames[:2] if isinstance(f, dict))
    return printable(f"{entry.get('action')} {entry.get('size')} B at {where or '(no frames)'}")


def _int(value, what: str) -> int:
    """A byte count of the snapshot: an int from 0 to 2**63 - 1, as the allocator's are (a
    401-digit size ended in an OverflowError traceback; a negative one printed as a peak)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotRefused(f"not a memory snapshot: {what} is {type(value).__name__}, not an integer")
    if not 0 <= value <= INT64_MAX:
        raise SnapshotRefused(f"not a memory snapshot: {what} is {short_number(value)}, not a byte count "
                              f"from 0 to 2**63 - 1")
    return value


def summarise(snap: dict) -> Summary:
    traces = [t for t in snap.get("device_traces", []) if isinstance(t, list) and t]
    entries = [e for e in (traces[0] if traces else []) if isinstance(e, dict)]
    segments = [s for s in snap.get("segments", []) if isinstance(s, dict)]
    end_reserved = sum(_int(s.get("total_size", 0), "a segment's total_size") for s in segments)
    end_allocated = sum(_int(b.get("size", 0), "a block's size") for s in segments
                        for b in (s.get("blocks") if isinstance(s.get("blocks"), list) else [])
                        if isinstance(b, dict) and b.get("state") == "active_allocated")
    delta = {"alloc": 1, "free_completed": -1, "segment_alloc": 1, "segment_free": -1}
    net_alloc = sum(delta[e["action"]] * _int(e.get("size"), "an entry's size") for e in entries
                    if e.get("action") in COMPARED)
    net_seg = sum(delta[e["action"]] * _int(e.get("size"), "an entry's size") for e in entries
                  if e.get("action") in ("segment_alloc", "segment_free"))
    allocated, reserved = end_allocated - net_alloc, end_reserved - net_seg
    peak_a, peak_r, events = allocated, reserved, []
    for e in entries:
        action = e.get("action")
        if action in COMPARED:
            allocated += delta[action] * e["size"]
            peak_a = max(peak_a, allocated)
            events.append(e)
        elif action in ("segment_alloc", "segment_free"):
            reserved += delta[action] * e["size"]
            peak_r = max(peak_r, reserved)
    return Summary(sum(1 for e in events if e.get("action") == "alloc"), peak_a, peak_r, events)


def compare(predicted: dict, real: dict) -> Comparison:
    p, r = summarise(predicted), summarise(real)
    for i, (a, b) in enumerate(zip(p.events, r.events)):
        if (a.get("action"), a.get("size")) != (b.get("action"), b.get("size")):
            return Comparison(p, r, i, a, b)
    if len(p.events) != len(r.events):
        i = min(len(p.events), len(r.events))
        return Comparison(p, r, i, p.events[i] if i < len(p.events) else None, r.events[i] if i < len(r.events) else None)
    return Comparison(p, r, None, None, None)
