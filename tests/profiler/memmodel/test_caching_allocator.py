"""The CUDA caching allocator simulation, one hand-worked trace per rule
(c10/cuda/CUDACachingAllocator.cpp; the constants are cited in profiler/memmodel/caching_allocator.py)."""

import random

import pytest

from attnprof.profiler.memmodel.caching_allocator import CachingAllocator, OutOfMemory, get_allocation_size, round_size

KiB, MiB = 1 << 10, 1 << 20


def test_requests_are_rounded_to_512_bytes_and_zero_bytes_get_no_block():
    a = CachingAllocator()
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert a.malloc(0) is None and a.stats.allocated == 0 and a.stats.reserved == 0
    b1 = a.malloc(1)  # 1 B -> a 512 B block
    assert b1.size == 512 and a.stats.allocated == 512
    b2 = a.malloc(513)  # -> 1024 B
    assert b2.size == 1024 and a.stats.allocated == 1536
    assert a.stats.requested == 514  # what was asked for, before rounding


def test_pool_choice_small_up_to_1mib_large_above():
    a = CachingAllocator()
    small = a.malloc(MiB)  # exactly kSmallSize: small pool
    large = a.malloc(MiB + 1)  # rounds to 1 MiB + 512: large pool
    assert small.small and not large.small
    assert a.stats.reserved == 2 * MiB + 20 * MiB  # one 2 MiB small segment, one 20 MiB large segment
    a.free(small)
    a.free(large)
    # a freed small block never serves a large request: a new segment is made
    c = a.malloc(MiB + 1)
    assert not c.small and a.stats.segments == 2


@pytest.mark.parametrize("request_bytes,segment", [
    (100, 2 * MiB),  # small: kSmallBuffer
    (MiB, 2 * MiB),
    (MiB + 512, 20 * MiB),  # 1..10 MiB: kLargeBuffer
    (10 * MiB - 512, 20 * MiB),
    (10 * MiB, 10 * MiB),  # >= kMinLargeAlloc: rounded up to kRoundLarge (2 MiB)
    (11 * MiB + 1, 12 * MiB),
    (1000 * MiB + 1, 1002 * MiB),
])
def test_segment_sizes(request_bytes, segment):
    assert get_allocation_size(round_size(request_bytes)) == segment
    a = CachingAllocator()
    a.malloc(request_bytes)
    assert a.stats.reserved == segment and a.stats.segments == 1


def test_split_thresholds_small_512_bytes_large_more_than_1mib():
    # small pool: a remainder of >= 512 B is split off and reused
    a = CachingAllocator()
    a.malloc(MiB)  # the first half of a 2 MiB small segment
    b = a.malloc(MiB - 512)  # leaves exactly 512 B: split off
    assert b.size == MiB - 512 and a.stats.allocated == 2 * MiB - 512 and len(a.cached_blocks()) == 1
    a.malloc(512)  # fits the 512 B remainder: no new segment
    assert a.stats.segments == 1 and a.stats.allocated == 2 * MiB

    # large pool: a remainder of exactly 1 MiB is NOT split: the whole 20 MiB block is handed out
    a = CachingAllocator()
    b = a.malloc(19 * MiB)
    assert b.size == 20 * MiB and a.stats.allocated == 20 * MiB
    # ... and a remainder of more than 1 MiB is
    a = CachingAllocator()
    b = a.malloc(19 * MiB - 512)
    assert b.size == 19 * MiB - 512 and a.stats.allocated == 19 * MiB - 512
    a.malloc(MiB + 512)  # takes the 1 MiB + 512 B remainder exactly
    assert a.stats.segments == 1 and a.stats.allocated == 20 * MiB


def test_reuse_after_free_is_best_fit_by_size_not_address():
    a = CachingAllocator()
    big = a.malloc(16 * MiB)  # lower address
    mid = a.malloc(12 * MiB)
    big_addr = big.addr  # (a split turns the cached Block object into the remainder, as in C++)
    a.free(big)
    a.free(mid)
    assert a.stats.reserved == 28 * MiB and a.stats.allocated == 0
    c = a.malloc(11 * MiB)  # the 12 MiB block is the best fit; 1 MiB remainder: not split
    assert c.size == 12 * MiB and c.addr == mid.addr
    assert a.stats.reserved == 28 * MiB and a.stats.allocated == 12 * MiB
    d = a.malloc(13 * MiB)  # the 16 MiB block: 3 MiB remainder > 1 MiB -> split
    assert d.addr == big_addr and d.size == 13 * MiB
    assert a.stats.segments == 2 and sorted(s for s, _, _ in a.cached_blocks()) == [3 * MiB]


def test_free_neighbours_merge_within_a_segment():
    a = CachingAllocator()
    x, y, z = (a.malloc(400 * KiB) for _ in range(3))  # one 2 MiB small segment
    assert a.stats.segments == 1
    a.free(x)
    a.free(y)  # merges with x: one 800 KiB free block at the segment's start
    assert sorted(a.cached_blocks()) == sorted([(800 * KiB, x.addr, True), (2 * MiB - 1200 * KiB, z.addr + 400 * KiB, True)])
    w = a.malloc(700 * KiB)  # only the merged block can hold it
    assert w.addr == x.addr and a.stats.segments == 1
    a.free(w)
    a.free(z)  # everything free again: one block, the whole segment
    assert a.cached_blocks() == [(2 * MiB, x.addr, True)]
    assert a.stats.reserved == 2 * MiB  # freed blocks stay reserved ...
    a.empty_cache()
    assert a.stats.reserved == 0 and a.stats.peak_reserved == 2 * MiB  # ... until empty_cache


def test_blocks_of_different_segments_never_merge():
    a = CachingAllocator()
    p, q = a.malloc(12 * MiB), a.malloc(12 * MiB)  # two exact 12 MiB segments
    a.free(p)
    a.free(q)
    assert sorted(s for s, _, _ in a.cached_blocks()) == [12 * MiB, 12 * MiB]
    a.malloc(20 * MiB)  # neither can hold it
    assert a.stats.reserved == 44 * MiB


def test_oversize_blocks_with_max_split_size():
    # default (unlimited max_split_size): a cached 50 MiB block serves a 30 MiB request, split
    a = CachingAllocator()
    a.free(a.malloc(50 * MiB))
    b = a.malloc(30 * MiB)
    assert b.size == 30 * MiB and a.stats.reserved == 50 * MiB
    # max_split_size_mb=40: the 50 MiB block is oversize: never split, never given to a request below 40 MiB
    a = CachingAllocator(max_split_size=40 * MiB)
    big = a.malloc(50 * MiB)
    big_addr = big.addr
    a.free(big)
    small = a.malloc(30 * MiB)
    assert small.addr != big_addr and a.stats.reserved == 80 * MiB
    # a request >= 40 MiB may take it if the block is < request + 20 MiB (kLargeBuffer) ...
    c = a.malloc(45 * MiB)
    assert c.addr == big_addr and c.size == 50 * MiB and a.stats.allocated == 30 * MiB + 50 * MiB
    a.free(c)
    # ... but not when it would waste 20 MiB or more
    a.free(a.malloc(70 * MiB))
    d = a.malloc(42 * MiB)
    assert d.addr == big_addr
    e = a.malloc(48 * MiB)  # only the 70 MiB block is cached, 70 >= 48 + 20: a new segment
    assert e.size == 48 * MiB and a.stats.segments == 4


def test_out_of_memory_releases_cached_segments_then_raises():
    a = CachingAllocator(capacity=30 * MiB)
    a.free(a.malloc(20 * MiB))  # a cached 20 MiB segment
    b = a.malloc(22 * MiB)  # 20 + 22 > 30: release the cached segment, retry
    assert b.size == 22 * MiB and a.stats.reserved == 22 * MiB and a.stats.alloc_retries == 1
    with pytest.raises(OutOfMemory):
        a.malloc(10 * MiB)  # 22 + 10 > 30 and nothing cached to release


def test_invariant_requested_le_allocated_le_reserved_on_a_random_trace():
    rng = random.Random(0)
    a = CachingAllocator()
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([rng.randrange(1, 4096), rng.randrange(1, 2 * MiB), rng.randrange(MiB, 64 * MiB)])
            live.append(a.malloc(size))
        s = a.stats
        assert s.requested <= s.allocated <= s.reserved
    s = a.stats
    assert s.peak_requested <= s.peak_allocated <= s.peak_reserved
    for b in live:
        a.free(b)
    assert a.stats.allocated == 0
    a.empty_cache()
    assert a.stats.reserved == 0 and a.stats.segments == 0  # every segment merged back whole
