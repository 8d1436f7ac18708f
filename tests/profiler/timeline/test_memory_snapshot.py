"""The predicted snapshot is one torch's own reader reads, in the viewer's pickle subset,
and its trace replays to the predicted peak."""

import dataclasses
import io
import pickle
import pickletools
import subprocess
import sys

import pytest
from timeline_points import HOSTILE, hostile_gpu, point, timeline_of, small, on_gpu  # noqa: F401 (fixtures)

from attnprof.profiler.timeline.build import point_timeline
from attnprof.profiler.timeline.memory_snapshot import PROTOCOL, dumps, snapshot

# opcodes of plain data (dicts, lists, tuples, str, int, float, bool, None) up to protocol 4:
# nothing that names a global or calls one (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*)
PLAIN_OPCODES = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1",
                 "TUPLE2", "TUPLE3", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "BININT", "BININT1", "BININT2",
                 "LONG1", "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "NEWTRUE", "NEWFALSE", "NONE",
                 "MEMOIZE", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT"}


def _replay_peak(snap: dict) -> int:
    now = peak = 0
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            now += e["size"]
            peak = max(peak, now)
        elif e["action"] == "free_completed":
            now -= e["size"]
    return peak


@pytest.fixture(params=["cpu", "gpu"])
def both(request, small, on_gpu):
    return small if request.param == "cpu" else on_gpu


@pytest.mark.slow
def test_torchs_own_reader_builds_its_pages_and_stats(both, tmp_path):
    from torch.cuda import _memory_viz

    snap = pickle.loads(dumps(snapshot(both)))
    assert "Memory Timeline" in _memory_viz.trace_plot(snap)
    assert "Allocator State History" in _memory_viz.segment_plot(snap)
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert f"{len(snap['device_traces'][0])} entries" in _memory_viz.trace(snap)
    path = tmp_path / "s.memory.pickle"
    path.write_bytes(dumps(snapshot(both)))
    out = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"segments: {len(snap['segments'])}" in out.stdout


def test_only_plain_data_opcodes_of_protocol_4_and_eight_byte_integers(both):
    data = dumps(snapshot(both))
    ops = list(pickletools.genops(data))
    assert max(op.proto for op, _, _ in ops) <= PROTOCOL == 4
    assert {op.name for op, _, _ in ops} <= PLAIN_OPCODES
    assert all(-(1 << 63) <= arg < (1 << 63) for op, arg, _ in ops if isinstance(arg, int) and op.name.startswith(("BININT", "LONG")))


def test_replaying_the_trace_gives_the_tensor_peak_without_a_gpu(small):
    snap = snapshot(small)
    assert _replay_peak(snap) == small.tensor_peak_bytes
    assert snap["allocator_settings"]["attnprof_source"].startswith("synthetic")
    assert all(len(s["blocks"]) == 1 for s in snap["segments"])


def test_replaying_the_trace_gives_the_allocated_peak_on_a_gpu(on_gpu):
    snap = snapshot(on_gpu)
    assert _replay_peak(snap) == on_gpu.allocations.allocated_peak_bytes
    reserved = peak = 0
    for e in snap["device_traces"][0]:
        reserved += {"segment_alloc": e["size"], "segment_free": -e["size"]}.get(e["action"], 0)
        peak = max(peak, reserved)
    assert peak == on_gpu.allocations.reserved_peak_bytes
    assert snap["allocator_settings"]["attnprof_source"].startswith("simulated")


def test_segments_are_the_end_state_of_the_trace_and_blocks_tile_them(both):
    snap = snapshot(both)
    live = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            del live[e["addr"]]
    active = {}
    for seg in snap["segments"]:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        at = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == at
            at += b["size"]
            if b["state"] == "active_allocated":
                active[b["address"]] = b["size"]
    assert active == live


def test_frames_name_the_op_the_layer_and_the_phase_and_categories_include_unknown(small):
    trace = snapshot(small)["device_traces"][0]
    frames = {(e["frames"][0]["filename"], e["frames"][1]["name"]) for e in trace}
    assert ("blocks.1", "forward") in frames and ("blocks.0", "backward") in frames
    assert any(e["frames"][0]["name"] == "mm.default" for e in trace)
    cats = {e["category"] for e in trace}
    assert {"parameters", "gradients", "activations", "unknown"} <= cats
    times = [e["time_us"] for e in trace]
    assert times == sorted(times) and times[-1] > 0


def test_hostile_labels_and_gpu_names_are_spelled_out():
    t = timeline_of(point())
    p = dataclasses.replace(t.point, variant=HOSTILE, spec=None)
    snap = snapshot(dataclasses.replace(t, point=p))
    text = repr(pickle.loads(dumps(snap))["allocator_settings"])
    assert "\\x1b[2J\\n\\u202e" in snap["allocator_settings"]["attnprof_point"]
    assert "\x1b" not in str(snap["allocator_settings"]) and "\u202e" not in text
    g = point_timeline(point(layers=1), gpu=hostile_gpu())
    settings = snapshot(g)["allocator_settings"]
    assert "\x1b" not in settings["attnprof_gpu"] and "\\x1b" in settings["attnprof_gpu"]
    assert not any(ch in str(settings) for ch in "\x1b\n\u202e")


def test_the_committed_example_still_reads():
    """docs/examples/: regenerate it with the command in docs/examples/README.md after a format change."""
    import json
    from pathlib import Path

    from torch.cuda import _memory_viz

    from attnprof.profiler.timeline.plain_pickle import load_plain

    folder = Path(__file__).resolve().parents[3] / "docs" / "examples"
    (snap_path,) = folder.glob("*.memory.pickle")
    (trace_path,) = folder.glob("*.trace.json")
    snap = load_plain(snap_path)
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert _replay_peak(snap) == snap["allocator_settings"]["attnprof_allocated_peak_bytes"]
    trace = json.loads(trace_path.read_text())
    assert trace["otherData"]["peak_bytes"] == _replay_peak(snap)
    assert snap_path.name.split(".")[0] in (folder / "README.md").read_text()


def test_forward_frames_name_the_module_inside_the_block(small):
    trace = snapshot(small)["device_traces"][0]
    forward = {e["frames"][0]["filename"] for e in trace if e["frames"][1]["name"] == "forward"}
    assert any(f.startswith("blocks.1.f") for f in forward) and any(f.startswith("blocks.0.g") for f in forward)


def test_a_hostile_module_name_is_spelled_out_in_the_frames():
    t = timeline_of(point())
    hostile = dataclasses.replace(t, module_of=["blocks.0\x1b[2J\n" if m else m for m in t.module_of])
    frames = [f for e in snapshot(hostile)["device_traces"][0] for f in e["frames"]]
    assert any("\\x1b[2J\\n" in f["filename"] for f in frames)
    assert not any(ch in f["filename"] for f in frames for ch in "\x1b\n")
