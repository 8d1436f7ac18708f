"""``sweep --timeline`` (issue 25) in the worker and the sweep's settings: a CUDA point's
memory pass writes its real snapshot into RUN/timelines (safely; an OOM's too), the CPU path
never touches the recorder (a CPU sweep writes the predicted timelines only), and ``--timeline`` on Ray is refused in one line
before anything is written. CUDA is faked (tests/fake_cuda_memory.py, tests/fake_nvml.py);
the real path runs in scripts/gpu_check.sh's stage timeline (a one-point sweep --timeline
whose snapshot torch's own reader, ``python -m torch.cuda._memory_viz stats``, must read)."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.gpumeasure.memory_history import real_snapshot_path
from attnprof.profiler.timeline.files import file_name
from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner import worker
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.sweep import SweepSettings
from fake_cuda_memory import SNAPSHOT, FakeRecorder
from fake_nvml import without_nvml

POINT = Point("sdpa", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))


class FakeWork:
    """Stands in for measure.workload.Workload on a device the CPU build cannot make."""

    oom = False

    def __init__(self, point, device):
        self.point, self.device = point, device

    def step(self):
        if FakeWork.oom:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.fixture
def fake_gpu(monkeypatch):
    calls: list = []
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: calls.append(_n))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 4096)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 8192)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    without_nvml(monkeypatch)
    monkeypatch.setattr(worker, "Workload", FakeWork)
    monkeypatch.setattr(FakeWork, "oom", False)
    FakeRecorder(calls).install(monkeypatch)
    return calls


def record() -> PointRecord:
    return PointRecord(**POINT.identity(), device="cuda")


def test_a_cuda_point_writes_its_real_snapshot(fake_gpu, tmp_path):
    rec = record()
    worker.record_cuda_memory(POINT, rec, "cuda:0", str(tmp_path))
    path = real_snapshot_path(tmp_path, file_name(POINT))
    assert pickle.loads(path.read_bytes()) == SNAPSHOT
    assert rec.measured_peak_bytes == 4096 and rec.measured_by == "cuda-allocator" and rec.reason == ""
    assert "record on" in fake_gpu and fake_gpu[-1] == "record off"


def test_without_timeline_no_recorder_and_no_file(fake_gpu, tmp_path):
    worker.record_cuda_memory(POINT, record(), "cuda:0")
    assert "record on" not in fake_gpu and list(tmp_path.iterdir()) == []


def test_an_oom_point_still_leaves_its_snapshot(fake_gpu, tmp_path):
    FakeWork.oom = True
    with pytest.raises(torch.OutOfMemoryError):
        worker.record_cuda_memory(POINT, record(), "cuda:0", str(tmp_path))
    assert real_snapshot_path(tmp_path, file_name(POINT)).is_file()


def test_a_planted_link_costs_the_snapshot_not_the_point(fake_gpu, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    folder = tmp_path / "timelines"
    folder.mkdir()
    os.symlink(victim, real_snapshot_path(folder, file_name(POINT)))
    rec = record()
    worker.record_cuda_memory(POINT, rec, "cuda:0", str(folder))
    assert victim.read_text() == "keep me"
    assert rec.measured_peak_bytes == 4096 and "real memory snapshot not written" in rec.reason


def test_the_cpu_path_never_records_a_snapshot(monkeypatch, tmp_path):
    calls: list = []
    recorder = FakeRecorder(calls).install(monkeypatch)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda *a, **k: pytest.fail("the CPU path touched the CUDA recorder"))
    rec = worker.measure_point(POINT, {"device": "cpu", "warmup": 0, "repeats": 1, "test_hook": "",
                                       "timeline_dir": str(tmp_path)})
    assert rec.status == "ok", rec.reason
    assert list(tmp_path.iterdir()) == [] and calls == [] and recorder.kwargs == []


def test_timeline_refused_on_ray_where_no_worker_can_reach_the_run_folder():
    with pytest.raises(SweepError) as err:
        SweepSettings(timeline=True, device="cuda", executor="ray")
    assert "use --executor local" in str(err.value) and "\n" not in str(err.value)
    assert SweepSettings(timeline=True, device="cuda:1").timeline  # a CUDA device: accepted
    assert SweepSettings(timeline=True, device="cpu").timeline  # a CPU: the predicted timelines only
    assert SweepSettings(device="cpu").timeline is False  # the default: off, CPU untouched


@pytest.mark.slow
def test_a_cpu_sweep_with_timeline_writes_the_predicted_files_of_every_ok_point(tmp_path):
    """--timeline means what predict's does: each measured point's predicted snapshot and trace,
    here into RUN/timelines; a CPU has no allocator to record, so no real snapshot."""
    from attnprof.profiler.timeline.files import SNAPSHOT_SUFFIX, TRACE_SUFFIX
    from attnprof.profiler.timeline.plain_pickle import load_plain

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--timeline", "--out", str(out), "-v", "sdpa",
                                      "-m", "plain", "-n", "64", "-n", "128", "--d-model", "32", "--heads", "2",
                                      "--layers", "1", "--repeats", "1", "--warmup", "0", "--no-report", "--quiet"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    names = sorted(p.name for p in (out / "timelines").iterdir())
    assert len(names) == 4 and not any(".real." in n for n in names), names
    assert sum(n.endswith(SNAPSHOT_SUFFIX) for n in names) == 2 and sum(n.endswith(TRACE_SUFFIX) for n in names) == 2
    snapshot = load_plain(next((out / "timelines").glob("*n128*" + SNAPSHOT_SUFFIX)))
    assert snapshot["device_traces"] and snapshot["segments"]
