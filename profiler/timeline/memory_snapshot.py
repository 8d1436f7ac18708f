"""A PyTorch memory snapshot of a predicted step: the dict ``torch.cuda.memory._snapshot()``
returns, which pytorch.org/memory_viz (torch/utils/viz/MemoryViz.js) and
``torch.cuda._memory_viz`` read. Its format, as this torch documents it (memory.py
``_snapshot``'s docstring) and reads it (_memory_viz.py): ``segments`` (the state at dump
time, here the end of the step: blocks tiling each segment), ``device_traces`` (one list
per device of alloc / free_requested / free_completed / segment_alloc / segment_free
entries with ``addr``, ``size``, ``stream``, ``time_us`` and ``frames``) and
``allocator_settings``.

Each entry's frames name the op and where it ran: the innermost frame is the op (file:
the module path, "blocks.3.f.fn.to_in" in a forward, the layer period "blocks.3" where
no module forward runs: backward), the outer one the phase ("forward", "backward"). Its
``category`` is the tracker's, "unknown" for the rest (inputs, a kernel's own buffers):
the viewer needs an "unknown" wherever there are categories. ``time_us``: the time model's.

Pickled with protocol 4 (the viewer's unpickler reads 2-4), plain data only (dicts,
lists, tuples, str, int, float, bool, None), integers below 2**63. Names from the user
(the variant label, a GPU's name) are spelled out by ``units.printable``.
"""

from __future__ import annotations

import pickle

from attnprof.profiler.timeline.build import Timeline
from attnprof.profiler.timeline.steps import phase_name
from attnprof.profiler.units import printable

PROTOCOL = 4
UNKNOWN = "unknown"
OWN_CATEGORIES = ("inputs",)  # tracker categories the viewer shows as "unknown"
SOURCES = {"synthetic": "synthetic: the tensor tracker's storages, one segment per storage at made-up addresses "
                        "(no caching allocator: pass --gpu NAME for one)",
           "simulated": "simulated: the CUDA caching allocator (attnprof's simulation, one stream, native backend)"}


def viewer_category(category: str) -> str:
    return UNKNOWN if category in OWN_CATEGORIES else str(category)


class _Frames:
    """Frame lists, one object per (op, module, phase): the pickle stores each once."""

    def __init__(self, timeline: Timeline):
        self.timeline, self.made = timeline, {}

    def at(self, i: int, op: str = "") -> list:
        t = self.timeline
        run = t.run_of[i] if i < len(t.run_of) else ("param", None)
        if not op:
            j = t.op_of[i] if i < len(t.op_of) else -1
            op = t.steps.ops[j].name if j >= 0 else "(registered before the step)"
        module = (t.module_of[i] if i < len(t.module_of) else "") or t.steps.module_path(run)
        key = (op, module, phase_name(run[0]))
        found = self.made.get(key)
        if found is None:
            found = self.made[key] = [{"filename": printable(key[1] or "model"), "line": 0, "name": printable(op)},
                                      {"filename": "attnprof (predicted)", "line": 0, "name": key[2]}]
        return found


def settings(timeline: Timeline) -> dict:
    """``allocator_settings``: where the addresses come from, and what was predicted."""
    t, a = timeline, timeline.allocations
    out = {"attnprof_predicted": True, "attnprof_source": SOURCES[a.source],
           "attnprof_point": printable(t.point.variant), "attnprof_key": printable(t.point.key_text()),
           "attnprof_tensor_peak_bytes": t.tensor_peak_bytes, "attnprof_allocated_peak_bytes": a.allocated_peak_bytes,
           "attnprof_reserved_peak_bytes": a.reserved_peak_bytes,
           "attnprof_time_model": printable(t.steps.device) if t.steps.timed else "none",
           "attnprof_step_us": t.steps.step_us, "attnprof_notes": [printable(n) for n in t.notes],
           "attnprof_categories": f"the tracker's; {', '.join(OWN_CATEGORIES)} shown as {UNKNOWN!r}"}
    if t.gpu is not None:
        out.update({"attnprof_gpu": printable(t.gpu.label), "attnprof_sdpa_backend": t.sdpa_backend,
                    "expandable_segments": False, "max_split_size": -1})
    return out


def snapshot(timeline: Timeline) -> dict:
    """The snapshot dict of ``timeline``."""
    frames = _Frames(timeline)
    trace = []
    for act in timeline.allocations.actions:
        entry = {"action": act.action, "addr": act.addr, "size": act.size, "stream": 0,
                 "time_us": int(round(timeline.time_us[act.at])),
                 "frames": frames.at(act.at, act.op if act.action in ("alloc", "segment_alloc") else ""),
                 "category": viewer_category(act.category)}
        trace.append(entry)
    segments = []
    for seg in timeline.allocations.segments:
        blocks = [{"address": b.addr, "size": b.size, "requested_size": b.requested,
                   "state": "active_allocated" if b.allocated else "inactive",
                   "frames": frames.at(b.at, b.op) if b.allocated else []} for b in seg.blocks]
        allocated = sum(b.size for b in seg.blocks if b.allocated)
        segments.append({"device": 0, "address": seg.addr, "total_size": seg.size, "stream": 0,
                         "segment_type": "small" if seg.small else "large", "segment_pool_id": (0, 0),
                         "allocated_size": allocated, "active_size": allocated,
                         "requested_size": sum(b.requested for b in seg.blocks if b.allocated),
                         "is_expandable": False, "frames": [], "blocks": blocks})
    return {"segments": segments, "device_traces": [trace], "allocator_settings": settings(timeline)}


def dumps(snap: dict) -> bytes:
    """The snapshot pickled as the viewer reads it (protocol 4)."""
    return pickle.dumps(snap, protocol=PROTOCOL)
