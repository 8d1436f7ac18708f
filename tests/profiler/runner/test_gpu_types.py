"""Where a sweep runs (profiler.runner.gpu_types): ``resolve_device`` turns auto into cuda
or cpu and refuses what cannot run, in one line; ``run_by_gpu_type`` refuses settings it
cannot honour before it connects to a cluster (the cluster runs are in
executors/test_ray_cluster.py)."""

import pytest

from attnprof.profiler.gpumeasure import devices
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.gpu_types import resolve_device, run_by_gpu_type
from attnprof.profiler.runner.sweep import SweepSettings
from attnprof.scenarios.scenario import Scenario


@pytest.fixture
def cuda(monkeypatch):
    """Whether CUDA is available, as the test says: no probe process is started."""
    def set_to(available: bool, compiled: bool = True, error: str = "no driver"):
        monkeypatch.setattr(devices, "cuda_available", lambda: available)
        monkeypatch.setattr(devices, "cuda_compiled", lambda: compiled)
        monkeypatch.setattr(devices, "probe", lambda: {"count": int(available), "error": error})
    return set_to


@pytest.mark.parametrize("available, expected", [(True, "cuda"), (False, "cpu")])
def test_auto_is_cuda_where_there_is_one_else_cpu(cuda, available, expected):
    cuda(available)
    assert resolve_device("auto") == expected


def test_cpu_and_an_available_cuda_device_stay_as_asked(cuda):
    cuda(True)
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda") == "cuda" and resolve_device("cuda:1") == "cuda:1"


def test_cuda_without_a_device_says_why_in_one_line(cuda):
    cuda(False, error="no driver found")
    with pytest.raises(SweepError, match=r"--device cuda:0: no CUDA device is available \(torch .*: no driver found\)"):
        resolve_device("cuda:0")
    cuda(False, compiled=False)
    with pytest.raises(SweepError, match="a CPU build of torch"):
        resolve_device("cuda")


def test_an_unknown_device_is_refused(cuda):
    cuda(True)
    with pytest.raises(SweepError, match="unknown device 'tpu'; choose auto, cpu or cuda"):
        resolve_device("tpu")


@pytest.mark.parametrize("settings, fragment", [
    (SweepSettings(executor="local", device="cuda"), "--gpu-types needs --executor ray"),
    (SweepSettings(executor="ray", device="cpu"), "--gpu-types runs on GPUs: use --device cuda, not cpu"),
])
def test_gpu_types_refuse_what_they_cannot_honour_before_connecting(tmp_path, settings, fragment):
    with pytest.raises(SweepError, match=fragment):
        run_by_gpu_type(Scenario(), tmp_path / "out", settings, ["all"], show_progress=False)
    assert not (tmp_path / "out").exists()
