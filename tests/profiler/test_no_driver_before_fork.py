"""No attnprof process calls into the CUDA driver and then forks a child (a CUDA build of torch).

On a GPU, a child forked after its parent started the driver fails at its first CUDA use ("CUDA
error: initialization error"): the first real GPU's sweep lost every point to that
(../shared/gpu-runs/h200-2026-12-04/). The cause was in torch's C++ (FakeTensorMode's
``__enter__`` -> ``c10::impl::ensureCUDADeviceGuardSet`` -> ``cudaGetDeviceCount`` -> ``cuInit``),
where the Python-level simulation of test_no_cuda_before_fork.py cannot look. Here the driver
itself is replaced: ``cudastub/libcuda_stub.c``, built with the machine's C compiler, stands on
LD_LIBRARY_PATH as ``libcuda.so.1``, answers every entry point with "no device" and records each
call with its C stack (and a process's first call with its Python stack); ``cudastub/sitecustomize.py`` logs every fork from a process
that made one. Only a CUDA build loads a driver, so these run in scripts/cuda_build_suite.sh
(CI runs it) and are skipped on a CPU build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

STUB = Path(__file__).parent / "cudastub"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda._is_compiled(),
                                 reason="needs a CUDA build of torch (scripts/cuda_build_suite.sh runs these)")]
FORKS = "forks after"


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory) -> Path:
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        pytest.fail("the CUDA build's suite needs a C compiler (cc, or $CC) to build the driver stand-in")
    out = tmp_path_factory.mktemp("cudastub")
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Wl,-soname,libcuda.so.1",
                    "-o", str(out / "libcuda.so.1"), str(STUB / "libcuda_stub.c")], check=True)
    return out


def under_stub(stub_dir: Path, log: Path, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs python ARGS with the stub as the driver; every fork goes to ``forks_file(log)``. The
    prediction cache is the test's own, so a prediction traced by an earlier run cannot spare a fork."""
    env = {**os.environ, "ATTNPROF_CACHE_DIR": str(log.parent / "cache"),
           "ATTNPROF_DRIVER_STUB": str(stub_dir / "libcuda.so.1"), "ATTNPROF_DRIVER_STUB_LOG": str(log),
           "ATTNPROF_DRIVER_STUB_FORKS": str(forks_file(log)),
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(stub_dir), os.environ.get("LD_LIBRARY_PATH")])),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(STUB), os.environ.get("PYTHONPATH")]))}
    for name in ("PYTORCH_NVML_BASED_CUDA_CHECK", "CUDA_VISIBLE_DEVICES", "ATTNPROF_FORK_SIM_LOG"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


def forks_file(log: Path) -> Path:
    return log.with_name(log.name + ".forks")


def forks_made(log: Path) -> int:
    """How many forks the processes run by ``under_stub`` made (``probe_fork``'s left out)."""
    path = forks_file(log)
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def driver_log(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""


def first_call(text: str) -> str:
    """The first recorded driver call: its entry point, C frames naming torch's functions, Python stack."""
    lines = text.splitlines()
    kept = [line for line in lines if not line.startswith("/") or "libtorch" in line or "libc10" in line]
    return "\n".join(kept[:40])


def no_fork_after_a_driver_call(log: Path, done: subprocess.CompletedProcess, forks_before: int = 0) -> None:
    """The run succeeded, forked (so the check means something) and forked nothing after a driver call."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert forks_made(log) > forks_before, "the run forked nothing: this check would pass without meaning anything"
    text = driver_log(log)
    assert FORKS not in text, (f"a process forked after calling the CUDA driver:\n{text[text.index(FORKS) - 20:][:2500]}"
                               f"\n... its first call:\n{first_call(text)}")


FORK = "\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)\n"


def test_the_stub_records_a_driver_call_and_the_fork_after_it(stub_dir, tmp_path):
    """The check can fail: asking torch whether CUDA is there calls the driver, then a fork is logged."""
    log = tmp_path / "driver.log"
    done = under_stub(stub_dir, log, ["-c", "import os, torch\nassert not torch.cuda.is_available()" + FORK])
    assert done.returncode == 0, done.stderr
    text = driver_log(log)
    assert "cuGetProcAddress" in text or "cuInit" in text, text[:2000]
    assert "Stack (most recent call first)" in text  # the Python stack of the first call
    assert FORKS in text
    assert forks_made(log) == 1


def test_importing_torch_and_attnprof_calls_no_driver(stub_dir, tmp_path):
    """libcublasLt loads libcuda.so.1 at import and calls nothing: loading is not starting."""
    log = tmp_path / "driver.log"
    done = under_stub(stub_dir, log, ["-c", "import torch, attnprof.cli\nfrom attnprof.profiler.runner import worker"])
    assert done.returncode == 0, done.stderr
    assert driver_log(log) == ""


@pytest.mark.parametrize("module", ["torch._dynamo", "torch.fx.experimental.symbolic_shapes"])
def test_importing_what_a_worker_would_import_calls_no_driver(stub_dir, tmp_path, module):
    """torch._dynamo (triton with it): what every TorchDispatchMode's first call imported in each worker
    before the worker measured under fakemode.light_dynamo; symbolic_shapes (sympy): what a reversible
    point's torch.autograd.grad imports. The helper may import the latter on a CUDA build only once a
    GPU also shows it (scripts/gpu_fork_check.py, "symbolic_shapes"); this is the part a CPU can show."""
    log = tmp_path / "driver.log"
    done = under_stub(stub_dir, log, ["-c", f"import os, {module}" + FORK])
    assert done.returncode == 0, done.stderr[-3000:]
    assert driver_log(log) == "", first_call(driver_log(log))
    assert forks_made(log) == 1


def test_a_fake_tensor_forward_calls_no_driver(stub_dir, tmp_path):
    """The first GPU's culprit (the warm helper's forward-only fake-tensor warm-up): torch's
    FakeTensorMode.__enter__ asked the CUDA device guard for a device count."""
    log = tmp_path / "driver.log"
    script = ("import os\nfrom attnprof.profiler.predict.fake_run import warm_fake_tensors\n"
              "warm_fake_tensors(forward_only=True)" + FORK)
    done = under_stub(stub_dir, log, ["-c", script])
    assert done.returncode == 0, done.stderr[-3000:]
    assert driver_log(log) == "", first_call(driver_log(log))


def test_the_sweeps_warm_helper_forks_before_any_driver_call(stub_dir, tmp_path):
    log = tmp_path / "driver.log"
    script = "import os\nfrom attnprof.profiler.runner import preload\npreload.warm_up()" + FORK
    no_fork_after_a_driver_call(log, under_stub(stub_dir, log, ["-c", script]))


def test_predictions_fork_their_pools_before_any_driver_call(stub_dir, tmp_path):
    """predict over several points forks its worker pool; a budget search forks too. A backward
    calls the driver (autograd's device threads count the devices), so it must come after."""
    log = tmp_path / "driver.log"
    common = ["-m", "attnprof", "predict", "--variant", "sdpa", "--variant", "full", "--variant", "lsh",
              "--mode", "plain", "--mode", "checkpoint", "--d-model", "32", "--heads", "2", "--layers", "1",
              "--dtype", "bf16", "--json"]
    no_fork_after_a_driver_call(log, under_stub(stub_dir, log, common + ["--seq-len", "256", "--seq-len", "512"]))
    forks = forks_made(log)
    no_fork_after_a_driver_call(log, under_stub(stub_dir, log, common + ["--budget", "64MiB", "--gpu", "h100-sxm"]),
                                forks_before=forks)


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_a_sweep_forks_nothing_after_a_driver_call_and_measures_its_point(stub_dir, tmp_path, device):
    """--device auto asks whether there is a GPU; the sweep then forks prediction workers, the
    warm helper and its worker. The point must also end ok."""
    log = tmp_path / "driver.log"
    out = tmp_path / "run"
    done = under_stub(stub_dir, log, ["-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain",
                                      "--mode", "checkpoint", "--min-len", "64", "--max-len", "128",
                                      "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1",
                                      "--warmup", "0", "--device", device, "--out", str(out), "--quiet"])
    no_fork_after_a_driver_call(log, done)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"] * 4
