"""No attnprof process asks CUDA for its devices, or runs a backward, and then forks a
child that may use CUDA or run a backward.

On a CUDA build the first makes every forked worker fail at its first CUDA tensor
("Cannot re-initialize CUDA in forked subprocess"), the second at its first backward
("Unable to handle autograd's threading in combination with fork-based multiprocessing"):
the first GPU sweep would have ended in ``error`` at every point, and ``predict`` over
several points would have failed (seen with torch 2.11.0+cu130). The CPU build shows
neither, so ``cudasim/sitecustomize.py`` simulates a CUDA build in every process these
tests start (warm helper, workers and prediction pools included): it logs each fork made
after a device-count call, and fails a backward in a child forked after autograd's
device threads started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SIM = Path(__file__).parent / "cudasim"
pytestmark = pytest.mark.slow


def simulated(args: list[str], log: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "ATTNPROF_FORK_SIM_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SIM), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


def no_fork_after_marking(log: Path, done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    forks = log.read_text(encoding="utf-8") if log.exists() else ""
    assert forks == "", (f"{forks.count('=== ')} fork hazard(s) hit (a fork after a CUDA device-count call, or a "
                         f"child's CUDA use after its parent's driver started); the first:\n{forks[:4000]}")


def test_the_simulation_sees_a_fork_after_a_device_count(tmp_path):
    """The check can fail: asking torch for the devices, then forking, is logged."""
    log = tmp_path / "forks.log"
    script = ("import os, torch; assert torch.cuda._is_compiled(); torch.cuda.is_available(); "
              "pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)")
    done = simulated(["-c", script], log)
    assert done.returncode == 0, done.stderr
    assert "forked after torch._C._cuda_getDeviceCount" in log.read_text(encoding="utf-8")


def test_warm_up_then_fork_as_the_sweep_helper_does(tmp_path):
    log = tmp_path / "forks.log"
    script = ("import os\nfrom attnprof.profiler.runner import preload\npreload.warm_up()\n"
              "pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)")
    no_fork_after_marking(log, simulated(["-c", script], log))


def test_a_multi_point_prediction(tmp_path):
    """predict over several points forks its worker pool, and a budget search forks too."""
    log = tmp_path / "forks.log"
    common = ["-m", "attnprof", "predict", "--variant", "sdpa", "--variant", "full", "--variant", "lsh",
              "--mode", "plain", "--mode", "checkpoint", "--d-model", "32", "--heads", "2", "--layers", "1",
              "--dtype", "bf16", "--json"]
    no_fork_after_marking(log, simulated(common + ["--seq-len", "256", "--seq-len", "512"], log))
    no_fork_after_marking(log, simulated(common + ["--budget", "64MiB", "--gpu", "h100-sxm"], log))


def test_a_one_point_sweep_with_its_report(tmp_path):
    """--device auto asks for CUDA; the sweep then forks prediction workers, the warm
    helper and its worker. The point must also be measured (ok), not just survive."""
    log = tmp_path / "forks.log"
    out = tmp_path / "run"
    done = simulated(["-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
                      "--max-len", "64", "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1",
                      "--warmup", "0", "--device", "auto", "--out", str(out), "--quiet"], log)
    no_fork_after_marking(log, done)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"]


# --- the CUDA driver's thread (what the first real GPU showed) -----------------------------------
# On the H200 a fake-tensor trace in the warm helper started the CUDA driver from inside torch's
# C++ (no device-count call to hook) and every worker forked afterwards failed. The simulation
# (ATTNPROF_SIM_DRIVER_THREAD) starts a real thread the way the driver does and breaks any child
# forked after it, so these tests fail exactly where the GPU did.
def driver(mode: str, args: list[str], log: Path) -> subprocess.CompletedProcess:
    os.environ["ATTNPROF_SIM_DRIVER_THREAD"] = mode
    try:
        return simulated(args, log)
    finally:
        del os.environ["ATTNPROF_SIM_DRIVER_THREAD"]


def test_the_simulated_driver_breaks_a_child_forked_after_it(tmp_path):
    """The check can fail: a fake-tensor run starts the driver, a forked child's fake run fails."""
    log = tmp_path / "forks.log"
    script = ("import os\nfrom torch._subclasses.fake_tensor import FakeTensorMode\n"
              "with FakeTensorMode(): pass\n"
              "from attnprof.profiler.forks import fork_hazard\nassert 'threads' in fork_hazard()\n"
              "pid = os.fork()\n"
              "if pid == 0:\n    try:\n        FakeTensorMode().__enter__()\n    except RuntimeError:\n"
              "        os._exit(3)\n    os._exit(0)\n"
              "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3")
    done = driver("fake", ["-c", script], log)
    assert done.returncode == 0, done.stderr
    text = log.read_text(encoding="utf-8")
    assert "used CUDA (FakeTensorMode) in a child forked after the driver started" in text


SWEEP = ["-m", "attnprof", "sweep", "--variant", "sdpa", "--variant", "full", "--mode", "plain", "--mode",
         "checkpoint", "--min-len", "64", "--max-len", "128", "--d-model", "32", "--heads", "2", "--layers", "1",
         "--repeats", "1", "--warmup", "0", "--device", "auto", "--quiet"]


@pytest.mark.parametrize("mode", ["fake", "start"])
def test_every_point_of_a_sweep_ends_ok_whatever_starts_the_driver(tmp_path, mode):
    """``fake``: the driver starts at a process's first fake-tensor run (as in the helper's warm-up
    on the H200): the helper, warmed only as the GPU showed safe, stays single-threaded and forks.
    ``start``: every process runs the driver from its start: the helper cannot fork, so each
    point runs in a fresh process, and the run says so once."""
    log = tmp_path / "forks.log"
    out = tmp_path / "run"
    done = driver(mode, SWEEP + ["--out", str(out)], log)
    no_fork_after_marking(log, done)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"] * 8, [r["reason"] for r in records]
    said = done.stderr.count("did not fork")
    assert said == (1 if mode == "start" else 0), done.stderr


@pytest.mark.parametrize("mode", ["fake", "start"])
def test_predictions_and_a_budget_search_never_fork_after_the_driver(tmp_path, mode):
    log = tmp_path / "forks.log"
    common = ["-m", "attnprof", "predict", "--variant", "sdpa", "--variant", "full", "--variant", "lsh",
              "--mode", "plain", "--mode", "checkpoint", "--d-model", "32", "--heads", "2", "--layers", "1",
              "--dtype", "bf16", "--json", "--no-cache"]
    for extra in (["--seq-len", "256", "--seq-len", "512"], ["--budget", "64MiB", "--gpu", "h100-sxm"]):
        done = driver(mode, common + extra, log)
        no_fork_after_marking(log, done)
        assert json.loads(done.stdout), done.stdout[:500]
