"""profiler/gpumeasure/memory_history.py: the real memory snapshot of a CUDA step.

On a CPU-only machine ``torch.cuda.memory``'s recorder is replaced by a fake that logs
its calls and returns a snapshot-shaped dict; the order around the measured step, the
pickle (protocol 4, plain data), the safe write (never through a planted link) and the
file names are checked. The test marked ``gpu`` records a real step."""

from __future__ import annotations

import os
import pickle
import pickletools

import pytest
from pathlib import Path
import torch

from attnprof.profiler.gpumeasure import devices, memory_history
from attnprof.profiler.gpumeasure.allocator_pass import cuda_memory_pass
from attnprof.profiler.gpumeasure.memory_history import (MemoryHistory, real_snapshot_path, snapshot_bytes,
                                                         timelines_folder, write_real_snapshot)
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.safeio import LinkRefused
from fake_cuda_memory import SNAPSHOT, FakeRecorder
from fake_nvml import without_nvml

NAME = "lsh-n_hashes=8-plain-model-n512-0123abcd"  # a file_name (profiler/timeline/files.py)


@pytest.fixture
def fake_cuda(monkeypatch):
    calls: list = []
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: calls.append(_n))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 300)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 320)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    without_nvml(monkeypatch)
    return calls


def test_the_recorder_runs_around_the_step_alone(monkeypatch, fake_cuda):
    recorder = FakeRecorder(fake_cuda).install(monkeypatch)
    history = MemoryHistory(max_entries=1234)
    result = cuda_memory_pass(lambda: fake_cuda.append("step"), "cuda:0", history=history)
    assert result["measured_peak_bytes"] == 300
    i = fake_cuda.index
    assert i("reset_peak_memory_stats") < i("record on") < i("step") < i("snapshot") < i("record off")
    assert fake_cuda[i("step") + 1] == "synchronize"  # every kernel done before the snapshot
    assert recorder.kwargs[0]["max_entries"] == 1234 and recorder.kwargs[0]["stacks"] == "python"
    assert recorder.kwargs[0]["clear_history"] is True and recorder.kwargs[-1]["enabled"] is None
    assert history.snapshot == SNAPSHOT


def test_without_history_the_pass_never_touches_the_recorder(monkeypatch, fake_cuda):
    FakeRecorder(fake_cuda).install(monkeypatch)
    cuda_memory_pass(lambda: fake_cuda.append("step"), "cuda:0")
    assert not any(c.startswith(("record", "snapshot")) for c in fake_cuda)


def test_an_oom_keeps_its_snapshot_and_the_recorder_stops(monkeypatch, fake_cuda):
    FakeRecorder(fake_cuda).install(monkeypatch)
    history = MemoryHistory()

    def step():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        cuda_memory_pass(step, "cuda:0", history=history)
    assert history.snapshot == SNAPSHOT and fake_cuda[-1] == "record off"


def test_a_broken_recorder_costs_the_snapshot_not_the_measurement(monkeypatch, fake_cuda):
    FakeRecorder(fake_cuda, fail_snapshot=True).install(monkeypatch)
    history = MemoryHistory()
    assert cuda_memory_pass(lambda: None, "cuda:0", history=history)["measured_peak_bytes"] == 300
    assert history.snapshot is None and "recorder broke" in history.problem and fake_cuda[-1] == "record off"
    path, problem = write_real_snapshot(os.devnull, NAME, history)
    assert path is None and "recorder broke" in problem


def test_the_file_is_protocol_4_plain_data(tmp_path):
    history = MemoryHistory()
    history.snapshot = SNAPSHOT
    path, problem = write_real_snapshot(tmp_path, NAME, history)
    assert problem == "" and path == real_snapshot_path(tmp_path, NAME)
    assert path.name.endswith(".real.memory.pickle")
    data = path.read_bytes()
    protocols = {int(proto) for op, proto, _ in pickletools.genops(data) if op.name == "PROTO"}
    assert protocols == {4}
    assert max(op.proto for op, _, _ in pickletools.genops(data)) <= 4
    assert not {op.name for op, _, _ in pickletools.genops(data)} & {"GLOBAL", "STACK_GLOBAL", "REDUCE"}
    assert pickle.loads(data) == SNAPSHOT
    assert snapshot_bytes(SNAPSHOT) == data


def test_a_planted_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    history = MemoryHistory()
    history.snapshot = SNAPSHOT
    os.symlink(victim, real_snapshot_path(tmp_path, NAME))
    path, problem = write_real_snapshot(tmp_path, NAME, history)
    assert path is None and "symbolic link" in problem and "\n" not in problem
    assert victim.read_text() == "keep me"


def test_the_timelines_folder_is_made_and_a_planted_one_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert timelines_folder(run) == run / "timelines" and (run / "timelines").is_dir()
    assert timelines_folder(run) == run / "timelines"  # again: already there
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "run2").mkdir()
    os.symlink(other, tmp_path / "run2" / "timelines")
    with pytest.raises(LinkRefused):
        timelines_folder(tmp_path / "run2")
    (tmp_path / "run3").mkdir()
    (tmp_path / "run3" / "timelines").write_text("a file")
    with pytest.raises(LinkRefused):
        timelines_folder(tmp_path / "run3")


def test_the_real_snapshot_takes_the_predicted_files_name():
    """One name for a point's predicted files and its real snapshot (profiler/timeline/files.py)."""
    from attnprof.profiler.timeline.files import SNAPSHOT_SUFFIX, file_name

    point = Point("lsh[n_hashes=8]", "plain", "model", Shape(seq_len=512, d_model=32, heads=2, layers=1))
    real = real_snapshot_path(Path("run/timelines"), file_name(point))
    assert real.name == file_name(point) + ".real" + SNAPSHOT_SUFFIX and real.parent == Path("run/timelines")


def test_max_entries_must_be_a_positive_integer():
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            MemoryHistory(max_entries=bad)
    assert memory_history.DEFAULT_MAX_ENTRIES > 0


@pytest.mark.gpu
@pytest.mark.skipif(not devices.cuda_available(), reason="needs a CUDA device")  # never poisons fork
def test_a_real_step_gives_a_snapshot_torch_reads(tmp_path):
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)

    def step():
        x = torch.empty(64 << 20, dtype=torch.uint8, device=device)
        x.fill_(1)
        del x

    history = MemoryHistory()
    result = cuda_memory_pass(step, device, history=history)
    path, problem = write_real_snapshot(tmp_path, NAME, history)
    assert problem == "", problem
    snap = pickle.loads(path.read_bytes())
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert max(sizes) >= 64 << 20 and result["measured_peak_bytes"] >= 64 << 20
    from torch.cuda import _memory_viz

    _memory_viz.trace_plot(snap)  # torch's own reader builds its page from our file
