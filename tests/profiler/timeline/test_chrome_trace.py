"""The predicted trace is trace-event JSON: ops nested in layers in phases, summing to the
step time; a live-bytes counter peaking at the predicted peak; the peak marked."""

import dataclasses
import json

import pytest
from timeline_points import HOSTILE, hostile_gpu, point, timeline_of, small, on_gpu  # noqa: F401 (fixtures)

from attnprof.profiler.timeline.build import point_timeline
from attnprof.profiler.timeline.chrome_trace import LIVE_COUNTER, RESERVED_COUNTER, dumps, trace_events


def _load(t, **kw) -> dict:
    return json.loads(dumps(trace_events(t, **kw)))


def _slices(trace, cat):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def test_it_parses_as_trace_event_json(small):
    trace = _load(small)
    assert set(trace) == {"traceEvents", "displayTimeUnit", "otherData"}
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "C", "i", "M") and isinstance(e["name"], str) and e["pid"] == 1
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0


def test_op_slices_sum_to_the_step_time_and_nest_in_layers_and_phases(small):
    trace = _load(small)
    ops = _slices(trace, "op")
    assert sum(e["dur"] for e in ops) == pytest.approx(small.steps.step_us, rel=1e-12)
    phases, layers = _slices(trace, "phase"), _slices(trace, "layer")
    assert [p["name"] for p in phases] == ["forward", "backward"]
    assert {"blocks.0", "blocks.1"} == {layer["name"] for layer in layers}
    for op in ops:
        assert sum(p["ts"] <= op["ts"] and op["ts"] + op["dur"] <= p["ts"] + p["dur"] for p in phases) == 1
    inside = [op for op in ops if any(la["ts"] <= op["ts"] and op["ts"] + op["dur"] <= la["ts"] + la["dur"]
                                      for la in layers)]
    assert len(inside) > len(ops) / 2


def test_the_live_bytes_counter_peaks_at_the_predicted_peak_and_the_peak_is_marked(small):
    trace = _load(small)
    totals = [sum(e["args"].values()) for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == LIVE_COUNTER]
    assert max(totals) == small.tensor_peak_bytes
    (peak,) = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert peak["args"]["bytes"] == small.tensor_peak_bytes and peak["args"]["op"] in peak["name"]
    assert trace["otherData"]["peak_bytes"] == small.tensor_peak_bytes


def test_on_a_gpu_the_counters_peak_at_the_allocated_and_reserved_peaks(on_gpu):
    events = _load(on_gpu)["traceEvents"]
    live = [sum(e["args"].values()) for e in events if e["ph"] == "C" and e["name"] == LIVE_COUNTER]
    reserved = [e["args"]["reserved"] for e in events if e["ph"] == "C" and e["name"] == RESERVED_COUNTER]
    assert max(live) == on_gpu.allocations.allocated_peak_bytes
    assert max(reserved) == on_gpu.allocations.reserved_peak_bytes


def test_many_small_ops_are_merged_and_the_file_says_so(small):
    whole, merged = _load(small), _load(small, max_slices=20)
    assert whole["otherData"]["merged_ops"] == 0 and "merged" not in whole["otherData"]
    assert merged["otherData"]["merged_ops"] > 0 and "merged" in merged["otherData"]
    n_whole = len(_slices(whole, "op"))
    kept, groups = _slices(merged, "op"), _slices(merged, "ops (merged)")
    assert len(kept) + len(groups) < n_whole
    assert sum(e["dur"] for e in kept + groups) == pytest.approx(small.steps.step_us, rel=1e-9)


def test_hostile_labels_and_gpu_names_are_spelled_out():
    t = timeline_of(point())
    p = dataclasses.replace(t.point, variant=HOSTILE, spec=None)
    text = dumps(trace_events(dataclasses.replace(t, point=p))).decode()
    parsed = json.loads(text)
    name = parsed["traceEvents"][0]["args"]["name"]
    assert "\\x1b[2J\\n\\u202e" in name and not any(ch in text for ch in "\x1b\u202e")
    assert not any(ch in json.dumps(parsed, ensure_ascii=False) for ch in "\x1b\u202e\x00")
    g = json.loads(dumps(trace_events(point_timeline(point(layers=1), gpu=hostile_gpu()))))
    assert not any(ch in json.dumps(g, ensure_ascii=False) for ch in "\x1b\u202e\n")
