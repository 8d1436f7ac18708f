"""The allocator's actions: synthetic (one segment per storage) and simulated (the caching
allocator watched through the one replay)."""

from attnprof.profiler.memmodel.caching_allocator import K_SMALL_BUFFER, CachingAllocator
from attnprof.profiler.memmodel.gpu_peak import replay
from attnprof.profiler.measure.tracker import ALLOC, FREE, OP
from attnprof.profiler.timeline.allocations import simulated, synthetic

EVENTS = [(ALLOC, 1, 1000, ""), (OP, "mm.default", None), (ALLOC, 2, 3000, "mm.default"), (ALLOC, 3, 0, "empty"),
          (FREE, 2), (OP, "add.Tensor", None), (ALLOC, 4, 5 << 20, "add.Tensor"), (FREE, 4)]
CATEGORIES = {1: "parameters", 2: "temporaries", 4: "activations"}


def test_synthetic_gives_each_storage_its_segment_and_the_tensor_peak():
    a = synthetic(EVENTS, CATEGORIES)
    assert [x.action for x in a.actions[:2]] == ["segment_alloc", "alloc"]
    assert [x.action for x in a.actions if x.at == 4] == ["free_requested", "free_completed", "segment_free"]
    assert a.tensor_peak_bytes == a.allocated_peak_bytes == a.reserved_peak_bytes == 1000 + (5 << 20)
    assert [(s.size, [b.category for b in s.blocks]) for s in a.segments] == [(1000, ["parameters"])]
    addrs = [x.addr for x in a.actions if x.action == "alloc"]
    assert len(set(addrs)) == len(addrs) == 3  # the zero-byte storage gets none


def test_simulated_packs_small_blocks_into_one_segment_and_matches_the_replay():
    a = simulated(EVENTS, CATEGORIES)
    plain = replay(EVENTS, CachingAllocator())
    assert (a.tensor_peak_bytes, a.allocated_peak_bytes, a.reserved_peak_bytes) == (
        plain.tensor_peak_bytes, plain.allocated_peak_bytes, plain.reserved_peak_bytes)
    small = [s for s in a.segments if s.small]
    assert len(small) == 1 and small[0].size == K_SMALL_BUFFER
    allocs = [x for x in a.actions if x.action == "alloc"]
    assert allocs[1].addr == allocs[0].addr + allocs[0].size  # the second block right after the first
    for s in a.segments:
        assert sum(b.size for b in s.blocks) == s.size
        assert [b.addr for b in s.blocks] == sorted(b.addr for b in s.blocks)
    assert {b.category for s in a.segments for b in s.blocks if b.allocated} == {"parameters"}
    assert [x.op for x in allocs] == ["", "mm.default", "add.Tensor"]
