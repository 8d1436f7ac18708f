"""A predicted snapshot beside a real one: counts, peaks, the first difference."""

import copy

from timeline_points import small, on_gpu  # noqa: F401 (fixtures)

from attnprof.profiler.timeline.memory_snapshot import snapshot
from attnprof.profiler.timeline.snapshot_diff import compare, summarise


def test_a_snapshot_agrees_with_itself(on_gpu):
    snap = snapshot(on_gpu)
    result = compare(snap, copy.deepcopy(snap))
    assert result.first_difference is None
    assert result.predicted.allocated_peak_bytes == on_gpu.allocations.allocated_peak_bytes
    assert result.predicted.reserved_peak_bytes == on_gpu.allocations.reserved_peak_bytes
    assert result.real.allocs == sum(1 for a in on_gpu.allocations.actions if a.action == "alloc")
    assert "agree" in result.text()


def test_the_first_difference_names_both_events(on_gpu):
    snap = snapshot(on_gpu)
    real = copy.deepcopy(snap)
    allocs = [e for e in real["device_traces"][0] if e["action"] == "alloc"]
    allocs[5]["size"] += 512
    allocs[5]["frames"] = [{"filename": "model.py", "line": 42, "name": "forward"}]
    result = compare(snap, real)
    compared = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    assert compared[result.first_difference] is [e for e in snap["device_traces"][0] if e["action"] == "alloc"][5]
    text = result.text()
    assert "model.py:42:forward" in text and result.predicted_event["frames"][0]["name"] in text
    assert result.to_dict()["first_difference"] == result.first_difference


def test_a_trace_that_starts_late_is_replayed_from_the_state_it_started_in(small):
    snap = snapshot(small)
    whole = summarise(snap)
    late = copy.deepcopy(snap)
    late["device_traces"][0] = late["device_traces"][0][40:]  # a ring buffer lost the start
    assert summarise(late).allocated_peak_bytes == whole.allocated_peak_bytes
    shorter = compare(snap, late)
    assert shorter.first_difference is not None


def test_a_size_beyond_int64_or_below_zero_is_refused_in_one_line():
    """A 401-digit size ended in an OverflowError traceback when printed; a negative one printed
    as 'allocated peak -5 GiB'. A snapshot's sizes are the allocator's int64 byte counts."""
    import pytest

    from attnprof.profiler.timeline.plain_pickle import SnapshotRefused

    def snap(size):
        return {"segments": [], "device_traces": [[{"action": "alloc", "size": size, "frames": []},
                                                    {"action": "free_completed", "size": size, "frames": []}]]}

    assert summarise(snap(2**63 - 1)) is not None
    for size, shown in ((10**400, "an integer of 1329 bits"), (10**5000, "an integer of 16610 bits"),
                        (-5 * 2**30, "-5368709120"), (2**63, str(2**63))):  # 10**5000: beyond str()'s 4300 digits
        with pytest.raises(SnapshotRefused, match=f"an entry's size is {shown}, not a byte count from 0 to 2"):
            summarise(snap(size))
