"""A stand-in for ``torch.cuda.memory``'s allocator recorder (``_record_memory_history``,
``_snapshot``), for the real-snapshot tests (``sweep --timeline``) on a CPU machine."""

from __future__ import annotations

import torch

SNAPSHOT = {"segments": [{"device": 0, "address": 1 << 40, "total_size": 2 << 20, "blocks": [
    {"size": 2 << 20, "requested_size": 1000, "state": "active_allocated", "frames": []}]}],
    "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 2 << 20, "stream": 0, "time_us": 1,
                        "frames": [{"filename": "x.py", "line": 1, "name": "f"}]}]]}


class FakeRecorder:
    """torch.cuda.memory's recorder: logs calls into ``calls``, hands out SNAPSHOT."""

    def __init__(self, calls: list, fail_snapshot: bool = False):
        self.calls, self.fail_snapshot, self.kwargs = calls, fail_snapshot, []

    def install(self, monkeypatch) -> "FakeRecorder":
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", self.record)
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", self.snapshot)
        monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", self.refuse_dump)
        return self

    def record(self, enabled="all", **kw):
        self.kwargs.append({"enabled": enabled, **kw})
        self.calls.append("record on" if enabled else "record off")

    def snapshot(self, *a, **kw):
        self.calls.append("snapshot")
        if self.fail_snapshot:
            raise RuntimeError("recorder broke")
        return SNAPSHOT

    def refuse_dump(self, *a, **kw):  # it opens its path with open(): follows a planted link
        raise AssertionError("_dump_snapshot must not be used")
