"""A simulation of PyTorch's CUDA caching allocator (the "native" backend), for replaying
an allocation trace on a machine without a GPU.

Every constant and rule below is PyTorch's, named after the C++ it mirrors, all in
``c10/cuda/CUDACachingAllocator.cpp`` (class ``DeviceCachingAllocator`` unless said
otherwise; read at pytorch/pytorch main, unchanged in substance since torch 2.1):

- ``round_size``: requests below ``kMinBlockSize`` (512 B) become 512 B, others are
  rounded up to a multiple of 512 B (``roundup_power2_divisions`` is off by default).
- ``get_pool``: rounded size <= ``kSmallSize`` (1 MiB) -> the small pool, else the large.
- ``get_allocation_size``: a new segment (one ``cudaMalloc``) is ``kSmallBuffer`` (2 MiB)
  for a small request, ``kLargeBuffer`` (20 MiB) below ``kMinLargeAlloc`` (10 MiB), else
  the request rounded up to ``kRoundLarge`` (2 MiB).
- ``get_free_block``: best fit, the smallest cached block of the pool with
  size >= request (ties: lowest address; ``BlockComparatorSize`` orders by stream, size,
  address). Oversize rules (only with ``max_split_size_mb`` set): a request below
  ``max_split_size`` never takes a block >= it, and a request >= it takes a block only if
  the block is < request + ``kLargeBuffer``.
- ``should_split``: the found block is split when the remainder is >= ``kMinBlockSize``
  (small pool) or > ``kSmallSize`` and the request < ``max_split_size`` (large pool);
  otherwise the whole block is handed out (and counted as allocated).
- ``alloc_found_block``: the request takes the front of the block, the remainder stays
  cached after it in the same segment.
- ``free`` / ``free_block`` / ``try_merge_blocks``: a freed block merges with its free
  neighbours in the same segment and stays cached (reserved) until ``emptyCache``.
- ``malloc``: no cached block -> ``alloc_block`` (a new segment); if that fails (out of
  memory): ``release_available_cached_blocks`` (only with ``max_split_size``), then
  ``release_cached_blocks`` (free every cached block that is a whole segment), then retry;
  then OOM.
- Statistics (``increase_stat``/``decrease_stat``): ``allocated_bytes`` counts block sizes
  (rounded, including an unsplit remainder), ``reserved_bytes`` segment sizes, both with
  peaks: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``.
- Zero-byte requests get no block (``NativeCachingAllocator::allocate``, ``size != 0``).

Not simulated: several streams and cross-stream events (one stream is assumed),
expandable segments, CUDA-graph private pools, ``garbage_collection_threshold``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Optional

# c10/cuda/CUDACachingAllocator.cpp, namespace-level constants
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: "all sizes are rounded to at least 512 bytes"
K_SMALL_SIZE = 1 << 20  # kSmallSize: "largest 'small' allocation is 1 MiB"
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: "'small' allocations are packed in 2 MiB blocks"
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: "allocations between 1 and 10 MiB may use kLargeBuffer"
K_ROUND_LARGE = 2 << 20  # kRoundLarge: "round up large allocations to 2 MiB"
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: "'large' allocations may be packed in 20 MiB blocks"
UNLIMITED = (1 << 64) - 1  # CUDAAllocatorConfig::max_split_size() default: numeric_limits<size_t>::max()


def round_size(size: int, divisions: int = 0) -> int:
    """``DeviceCachingAllocator::round_size`` (with ``roundup_power2_next_division``)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor >> (divisions.bit_length() - 1)
        if step == 0:
            return floor << 1
        low = size & ~(step - 1)
        return size if low == size else low + step
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def is_small(rounded: int) -> bool:
    """``DeviceCachingAllocator::get_pool``: the small pool holds requests <= 1 MiB."""
    return rounded <= K_SMALL_SIZE


def get_allocation_size(rounded: int) -> int:
    """``DeviceCachingAllocator::get_allocation_size``: the size of a new segment."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((rounded + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class OutOfMemory(Exception):
    """The simulated ``cudaMalloc`` failed even after releasing cached segments."""

    def __init__(self, request: int, segment: int, allocated: int, reserved: int, capacity: int):
        self.request, self.segment, self.allocated, self.reserved, self.capacity = (
            request, segment, allocated, reserved, capacity)
        super().__init__(f"out of memory: tried to allocate a {segment} B segment for {request} B with {allocated} B "
                         f"allocated, {reserved} B reserved of {capacity} B")


class Block:
    """``struct Block``: a range of one segment, allocated or cached."""

    __slots__ = ("addr", "size", "small", "prev", "next", "allocated", "requested")

    def __init__(self, addr: int, size: int, small: bool):
        self.addr, self.size, self.small = addr, size, small
        self.prev: Optional[Block] = None
        self.next: Optional[Block] = None
        self.allocated = False
        self.requested = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "allocated" if self.allocated else "free"
        return f"Block({self.addr:#x}, {self.size}, {'small' if self.small else 'large'}, {state})"


class _Pool:
    """``struct BlockPool``: the cached (free) blocks, ordered by (size, address)."""

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[tuple[int, int]] = []  # sorted (size, addr)
        self.blocks: dict[int, Block] = {}  # addr -> block

    def insert(self, block: Block) -> None:
        bisect.insort(self.keys, (block.size, block.addr))
        self.blocks[block.addr] = block

    def erase(self, block: Block) -> None:
        i = bisect.bisect_left(self.keys, (block.size, block.addr))
        assert self.keys[i] == (block.size, block.addr), "block not in its pool"
        del self.keys[i]
        del self.blocks[block.addr]

    def lower_bound(self, size: int) -> Optional[Block]:
        """The first block with size >= ``size`` (``blocks.lower_bound(&search_key)``)."""
        i = bisect.bisect_left(self.keys, (size, -1))
        return self.blocks[self.keys[i][1]] if i < len(self.keys) else None


@dataclass
class AllocatorStats:
    allocated: int = 0  # bytes in allocated blocks (memory_allocated)
    reserved: int = 0  # bytes in segments (memory_reserved)
    requested: int = 0  # bytes asked for, before rounding
    peak_allocated: int = 0  # max_memory_allocated
    peak_reserved: int = 0  # max_memory_reserved
    peak_requested: int = 0
    segments: int = 0
    device_allocs: int = 0  # cudaMalloc calls
    device_frees: int = 0  # cudaFree calls
    alloc_retries: int = 0  # allocations that needed cached segments released first


class CachingAllocator:
    """One device, one stream. ``capacity``: the bytes ``cudaMalloc`` can hand out in
    total (None: unlimited). ``max_split_size``: ``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb``
    in bytes (None: unlimited, PyTorch's default)."""

    def __init__(self, capacity: Optional[int] = None, max_split_size: Optional[int] = None,
                 roundup_power2_divisions: int = 0):
        self.capacity = capacity
        self.max_split_size = UNLIMITED if max_split_size is None else int(max_split_size)
        self.divisions = roundup_power2_divisions
        self.small_pool, self.large_pool = _Pool(True), _Pool(False)
        self.stats = AllocatorStats()
        self._next_addr = 1 << 32  # segments get disjoint, never reused address ranges

    # --- DeviceCachingAllocator::malloc ---------------------------------------------------
    def malloc(self, nbytes: int) -> Optional[Block]:
        """Allocate ``nbytes``; None for zero bytes (no block); raises ``OutOfMemory``."""
        if nbytes == 0:
            return None
        size = round_size(nbytes, self.divisions)
        pool = self.small_pool if is_small(size) else self.large_pool
        alloc_size = get_allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, alloc_size)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, alloc_size)
            if block is None:
                self._release_cached_blocks()
                self.stats.alloc_retries += 1
                block = self._alloc_block(pool, alloc_size)
            if block is None:
                raise OutOfMemory(nbytes, alloc_size, self.stats.allocated, self.stats.reserved, self.capacity)
        return self._alloc_found_block(pool, block, size, nbytes)

    def _get_free_block(self, pool: _Pool, size: int) -> Optional[Block]:
        block = pool.lower_bound(size)
        if block is None:
            return None
        # "Do not return an oversized block for a large request"
        if size < self.max_split_size and block.size >= self.max_split_size:
            return None
        # "Allow oversized block size to be rounded up but within a limit"
        if size >= self.max_split_size and block.size >= size + K_LARGE_BUFFER:
            return None
        pool.erase(block)
        return block

    def _alloc_block(self, pool: _Pool, alloc_size: int) -> Optional[Block]:
        if self.capacity is not None and self.stats.reserved + alloc_size > self.capacity:
            return None  # cudaMalloc: cudaErrorMemoryAllocation
        block = Block(self._next_addr, alloc_size, pool.small)
        self._next_addr += alloc_size + K_ROUND_LARGE
        s = self.stats
        s.reserved += alloc_size
        s.peak_reserved = max(s.peak_reserved, s.reserved)
        s.segments += 1
        s.device_allocs += 1
        return block

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, pool: _Pool, block: Block, size: int, requested: int) -> Block:
        if self._should_split(block, size):
            remaining = block
            block = Block(remaining.addr, size, pool.small)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.addr += size
            remaining.size -= size
            pool.insert(remaining)
        block.allocated = True
        block.requested = requested
        s = self.stats
        s.allocated += block.size
        s.peak_allocated = max(s.peak_allocated, s.allocated)
        s.requested += requested
        s.peak_requested = max(s.peak_requested, s.requested)
        return block

    # --- DeviceCachingAllocator::free / free_block / try_merge_blocks ---------------------
    def free(self, block: Optional[Block]) -> None:
        if block is None:
            return
        assert block.allocated, "double free"
        block.allocated = False
        self.stats.allocated -= block.size
        self.stats.requested -= block.requested
        pool = self.small_pool if block.small else self.large_pool
        for neighbour in (block.prev, block.next):
            self._try_merge(block, neighbour, pool)
        pool.insert(block)

    @staticmethod
    def _try_merge(dst: Block, src: Optional[Block], pool: _Pool) -> None:
        if src is None or src.allocated:
            return
        pool.erase(src)
        if dst.prev is src:  # [src dst]
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    # --- releasing cached segments (emptyCache, and before an OOM) ------------------------
    def _release_block(self, block: Block, pool: _Pool) -> None:
        pool.erase(block)
        self.stats.reserved -= block.size
        self.stats.segments -= 1
        self.stats.device_frees += 1

    def _release_cached_blocks(self) -> None:
        """``release_cached_blocks`` -> ``release_blocks``: free every cached block that is a
        whole segment (neither ``prev`` nor ``next``)."""
        for pool in (self.large_pool, self.small_pool):
            for block in [b for b in pool.blocks.values() if not b.is_split()]:
                self._release_block(block, pool)

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        """``release_available_cached_blocks``: with ``max_split_size`` set, free one
        oversize cached block that is big enough, else oversize blocks from the largest
        down until enough is freed."""
        if self.max_split_size == UNLIMITED:
            return False
        key = max(size, self.max_split_size)
        found = pool.lower_bound(key)
        if found is not None:
            self._release_block(found, pool)
            return True
        released = 0
        for block_size, addr in reversed(list(pool.keys)):
            if released >= key or block_size < self.max_split_size:
                break
            released += block_size
            self._release_block(pool.blocks[addr], pool)
        return released >= key

    def empty_cache(self) -> None:
        """``emptyCache``: ``release_cached_blocks``."""
        self._release_cached_blocks()

    # --- inspection -----------------------------------------------------------------------
    def cached_blocks(self) -> list[tuple[int, int, bool]]:
        """(size, address, small) of every cached free block, smallest first."""
        return [(size, addr, pool.small) for pool in (self.small_pool, self.large_pool) for size, addr in pool.keys]
