"""What the allocator does, action by action, for a point's ordered allocation trace:
the ``device_traces`` and ``segments`` of a PyTorch memory snapshot (memory_snapshot.py).

Two sources, said in the snapshot's ``allocator_settings``:

- ``synthetic``: the tensor tracker's trace (measure/tracker.py) as it is: one segment per
  storage, exactly its bytes, at made-up addresses that never overlap. Its allocated peak
  is the tracker's peak, to the byte.
- ``simulated``: the GPU trace (memmodel/sdpa_kernels.py ``substitute``) replayed through
  the caching-allocator simulation by the one replay (memmodel/gpu_peak.py ``replay``),
  watched: each block it hands out or takes back, and each segment it maps, becomes an
  action at the block's simulated address. Its peaks are the model's allocated and
  reserved peaks, to the byte. One stream, no release of cached segments (the replay
  without a memory limit), as ``gpu_peak`` replays first.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from attnprof.profiler.memmodel.caching_allocator import K_MIN_BLOCK_SIZE, CachingAllocator, is_small, round_size
from attnprof.profiler.memmodel.gpu_peak import replay
from attnprof.profiler.memmodel.sdpa_kernels import ALLOC, FREE

SYNTHETIC_BASE = 1 << 32  # the first made-up address (a GPU's are this large too)


@dataclass
class Action:
    """One trace entry: alloc | free_requested | free_completed | segment_alloc | segment_free."""

    action: str
    addr: int
    size: int  # bytes of the block (segment) the allocator handed out or took back
    requested: int  # bytes asked for (the tensor's storage)
    category: str  # the tracker's category of the storage ("unknown" for a kernel's buffer)
    at: int  # position in the source trace of the event that caused it
    op: str = ""  # the op that allocated the block (alloc), as the trace names it


@dataclass
class Block:
    addr: int
    size: int
    requested: int
    allocated: bool
    category: str = "unknown"
    at: int = -1  # where it was allocated (-1: a cached free block)
    op: str = ""


@dataclass
class Segment:
    addr: int
    size: int
    small: bool
    blocks: list = field(default_factory=list)  # [Block], tiling the segment in address order


@dataclass
class Allocations:
    source: str  # "synthetic" | "simulated"
    actions: list  # [Action] in order
    segments: list  # [Segment] at the end of the step (the snapshot's dump time)
    tensor_peak_bytes: int  # live requested bytes, peak
    allocated_peak_bytes: int
    reserved_peak_bytes: int


def _category(name, categories: dict) -> str:
    return categories.get(name, "unknown") if isinstance(name, int) else "unknown"


def synthetic(events: list, categories: dict) -> Allocations:
    """One segment per storage, one block filling it; zero-byte storages get none (no
    allocator call either: ``NativeCachingAllocator::allocate`` skips size 0)."""
    actions, live, segs = [], {}, {}
    addr, now, peak = SYNTHETIC_BASE, 0, 0
    for i, e in enumerate(events):
        if e[0] == ALLOC and e[2] > 0:
            _, name, nbytes, op = e
            cat = _category(name, categories)
            live[name] = (addr, nbytes, cat, i, op)
            actions += [Action("segment_alloc", addr, nbytes, nbytes, cat, i, op), Action("alloc", addr, nbytes, nbytes, cat, i, op)]
            addr += -(-nbytes // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE + K_MIN_BLOCK_SIZE  # a gap: never adjacent
            now += nbytes
            peak = max(peak, now)
        elif e[0] == FREE and e[1] in live:
            a, nbytes, cat, _, op = live.pop(e[1])
            actions += [Action(kind, a, nbytes, nbytes, cat, i, op)
                        for kind in ("free_requested", "free_completed", "segment_free")]
            now -= nbytes
    for a, nbytes, cat, i, op in live.values():
        segs[a] = Segment(a, nbytes, is_small(round_size(nbytes)), [Block(a, nbytes, nbytes, True, cat, i, op)])
    return Allocations("synthetic", actions, [segs[a] for a in sorted(segs)], peak, peak, peak)


class _Watched(CachingAllocator):
    """The caching allocator, its blocks and segments written down as they come and go;
    ``where[0]`` is the source position of the event being replayed."""

    def __init__(self, events: list, categories: dict):
        super().__init__()
        self.events, self.categories = events, categories
        self.where = [0]
        self.actions: list = []
        self.live: dict = {}  # id(block) -> Block (as allocated)
        self.segments: dict = {}  # addr -> Segment (no blocks yet)

    def malloc(self, nbytes: int):
        allocs, reserved = self.stats.device_allocs, self.stats.reserved
        block = super().malloc(nbytes)
        if block is None:
            return None
        i = self.where[0]
        e = self.events[i]
        name, op = (e[1], e[3]) if e[0] == ALLOC else (None, "")
        cat = _category(name, self.categories)
        if self.stats.device_allocs > allocs:  # a new segment; the block is its front
            size = self.stats.reserved - reserved
            self.segments[block.addr] = Segment(block.addr, size, block.small)
            self.actions.append(Action("segment_alloc", block.addr, size, nbytes, cat, i, op))
        self.live[id(block)] = Block(block.addr, block.size, nbytes, True, cat, i, op)
        self.actions.append(Action("alloc", block.addr, block.size, nbytes, cat, i, op))
        return block

    def free(self, block) -> None:
        if block is not None:
            b = self.live.pop(id(block))
            for kind in ("free_requested", "free_completed"):
                self.actions.append(Action(kind, b.addr, b.size, b.requested, b.category, self.where[0], b.op))
        super().free(block)


def simulated(events: list, categories: dict) -> Allocations:
    """``events`` (a GPU trace: ALLOC/FREE/ALIAS/TIE by name) through the caching allocator."""
    allocator = _Watched(events, categories)

    def positioned():
        for i, e in enumerate(events):
            allocator.where[0] = i
            yield e

    result = replay(positioned(), allocator)
    blocks = list(allocator.live.values()) + [Block(addr, size, 0, False) for size, addr, _ in allocator.cached_blocks()]
    segments = sorted(allocator.segments.values(), key=lambda s: s.addr)
    starts = [s.addr for s in segments]
    for b in sorted(blocks, key=lambda b: b.addr):
        segments[bisect.bisect_right(starts, b.addr) - 1].blocks.append(b)
    return Allocations("simulated", allocator.actions, segments, result.tensor_peak_bytes,
                       result.allocated_peak_bytes, result.reserved_peak_bytes)
