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
