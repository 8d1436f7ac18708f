"""`--executor ray` on a real local Ray cluster (this machine's CPUs): the same points and
the same exact memory as the local executor, spread over several worker processes; a
killed worker, a hang, an interrupt and an unreachable head node keep the local
executor's guarantees; nothing of Ray is left running afterwards."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")

from attnprof.profiler.records import key_of_record  # noqa: E402
from attnprof.profiler.runner.storage import read_records  # noqa: E402
from attnprof.profiler.runner.sweep import SweepSettings, run_sweep  # noqa: E402
from attnprof.scenarios.scenario import Scenario, load_scenario  # noqa: E402

pytestmark = pytest.mark.slow

TINY = Scenario(name="tiny", variants=("sdpa", "full"), modes=("plain",), min_len=64, max_len=256,
                d_model=32, heads=2, layers=1, repeats=1, warmup=0)
RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard", "runtime_env")


def settings(**kw) -> SweepSettings:
    base = dict(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook="", executor="ray",
                mem_limit_from_device=True)
    return SweepSettings(**{**base, **kw})


def ray_processes(root: psutil.Process) -> list[psutil.Process]:
    out = []
    for proc in root.children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any(n in " ".join(proc.cmdline()) for n in RAY_PROCESSES):
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def cluster():
    """One local 2-CPU cluster for the module, on the loopback interface; gone afterwards."""
    from ray._private import ray_constants

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    loopback, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    try:
        # Two GPUs of a made-up type, as resources only (nothing here has CUDA): for --gpu-types's plumbing.
        ray.init(num_cpus=2, num_gpus=2, resources={"accelerator_type:FakeGPU": 1}, include_dashboard=False,
                 logging_level=logging.ERROR, log_to_driver=False)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = loopback
        for sig, handler in handlers.items():  # ray.init installs its own SIGTERM handler
            signal.signal(sig, handler)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        me = psutil.Process()
        deadline = time.monotonic() + 30
        while ray_processes(me) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p.name() for p in ray_processes(me)]
        assert left == [], f"Ray processes left running: {left}"


def by_key(run_dir: Path) -> dict:
    return {(r["variant"], r["mode"], r["seq_len"]): r for r in read_records(run_dir)}


def test_ci_points_have_the_same_exact_memory_as_local_spread_over_workers(cluster, tmp_path):
    """A subset of the ci scenario (2 variants x 2 modes x 256, 512; one timed step, to keep it short)."""
    sc = load_scenario("ci").override(variants=("sdpa", "sparse_strided"), modes=("plain", "reversible"),
                                      max_len=512, repeats=1, warmup=0)
    local = run_sweep(sc, tmp_path / "local", settings(executor="local", mem_limit_from_device=False),
                      show_progress=False)
    on_ray = run_sweep(sc, tmp_path / "ray", settings(), show_progress=False)
    assert not local.interrupted and not on_ray.interrupted
    print(f"local {local.wall_s:.1f} s, ray {on_ray.wall_s:.1f} s")
    here, there = read_records(tmp_path / "local"), read_records(tmp_path / "ray")
    assert len(here) == len(there) == 8
    mine = {key_of_record(r): r for r in here}
    theirs = {key_of_record(r): r for r in there}
    assert set(mine) == set(theirs) and len(theirs) == len(there)  # no point twice
    for key, record in theirs.items():
        assert record["status"] == mine[key]["status"] == "ok", record["reason"]
        assert record["measured_by"] == "tensor-tracker"
        assert record["measured_peak_bytes"] == mine[key]["measured_peak_bytes"] > 0
        assert record["predicted_peak_bytes"] == mine[key]["predicted_peak_bytes"]
        assert record["host"] and record["device_name"] and record["worker_pid"] != os.getpid()
    assert len({r["worker_pid"] for r in there}) == 8  # max_calls=1: a fresh worker process per point
    assert all(r["host"] and r["worker_pid"] for r in here)
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["cluster"]["executor"] == "ray" and manifest["cluster"]["slots"] == 2
    assert manifest["cluster"]["nodes"][0]["cpus"] == 2 and manifest["cluster"]["started_local_cluster"] is False


def test_a_killed_worker_is_crashed_and_the_rest_finish(cluster, tmp_path):
    summary = run_sweep(TINY, tmp_path, settings(test_hook="full@128=kill"), show_progress=False)
    records = by_key(tmp_path)
    assert len(records) == len(read_records(tmp_path)) == 6 and len(summary.records) == 6
    killed = records[("full", "plain", 128)]
    assert killed["status"] == "crashed" and "Ray worker died" in killed["reason"], killed["reason"]
    assert killed["predicted_peak_bytes"] > 0 and killed["host"]
    others = [r for key, r in records.items() if key != ("full", "plain", 128)]
    assert [r["status"] for r in others] == ["ok"] * 5, [r["reason"] for r in others]


def test_a_hang_is_cancelled_at_the_point_timeout_and_longer_lengths_are_skipped(cluster, tmp_path):
    # The hook sleeps for an hour: the sweep returns only because the hung point was cancelled.
    run_sweep(TINY.override(variants=("sdpa",), max_len=128), tmp_path,
              settings(test_hook="sdpa@64=hang", point_timeout_s=4.0), show_progress=False)
    records = by_key(tmp_path)
    hung = records[("sdpa", "plain", 64)]
    assert hung["status"] == "timeout" and "--point-timeout 4" in hung["reason"] and hung["worker_pid"]
    assert gone(hung["worker_pid"]), "the hung Ray worker was abandoned, not killed"
    after = records[("sdpa", "plain", 128)]
    assert after["status"] == "skipped" and "timed out at n=64" in after["reason"]


def test_gpu_types_run_the_sweep_once_per_type_each_into_its_own_run_folder(cluster, tmp_path):
    from attnprof.profiler.runner.gpu_types import SweepError, run_by_gpu_type

    one = TINY.override(variants=("sdpa",), max_len=64)
    with pytest.raises(SweepError, match="no GPU of type H100; it has FakeGPU x2"):
        run_by_gpu_type(one, tmp_path / "none", settings(device="cuda"), ["H100"], show_progress=False)
    summary, folders = run_by_gpu_type(one, tmp_path / "cmp", settings(device="cuda"), ["all"], show_progress=False)
    assert folders == [tmp_path / "cmp" / "FakeGPU"] and not summary.interrupted
    assert json.loads((tmp_path / "cmp" / "gpu-types.json").read_text())["gpu_types"] == {"FakeGPU": "FakeGPU"}
    [record] = read_records(folders[0])  # no CUDA here: the point is an error, but it is recorded
    assert record["device"] == "cuda" and record["status"] == "error" and record["worker_pid"]
    manifest = json.loads((folders[0] / "manifest.json").read_text())
    assert manifest["settings"]["gpu_type"] == "FakeGPU" and manifest["cluster"]["gpu_types"] == {"FakeGPU": 2}
    assert manifest["cluster"]["resources_per_point"]["num_gpus"] == 1


def test_interrupt_then_resume_loses_nothing_and_duplicates_nothing(cluster, tmp_path):
    seen = []

    def stop_after_two(record):
        seen.append(record)
        if len(seen) == 2:
            raise KeyboardInterrupt

    summary = run_sweep(TINY, tmp_path, settings(), show_progress=False, on_record=stop_after_two)
    assert summary.interrupted and len(read_records(tmp_path)) == 2
    first = {key_of_record(r): r["finished_at"] for r in read_records(tmp_path)}
    resumed = run_sweep(TINY, tmp_path, settings(), resume=True, show_progress=False)
    assert resumed.kept == 2 and len(resumed.records) == 4
    records = read_records(tmp_path)
    keys = [key_of_record(r) for r in records]
    assert len(keys) == len(set(keys)) == 6
    assert all(r["finished_at"] == first[key_of_record(r)] for r in records[:2])


# --- the command line ------------------------------------------------------------------------
CLI = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
       "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu",
       "--no-report", "--quiet", "--executor", "ray"]


def cli_env(ray_tmp: str = "", hook: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["ATTNPROF_TEST_HOOK"] = hook
    if ray_tmp:
        env["RAY_TMPDIR"] = ray_tmp  # its own cluster, never one a developer started with `ray start`
    return env


def test_an_unreachable_head_node_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(CLI + ["--max-len", "64", "--out", str(tmp_path / "run"), "--ray-address", "127.0.0.1:1"],
                          capture_output=True, text=True, timeout=120, env=cli_env())
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and "127.0.0.1:1" in errors[0] and "Traceback" not in done.stderr, done.stderr
    # refused by the TCP probe, before ray.init was ever tried (which would wait for the address)
    assert "cannot reach the Ray cluster" in errors[0], errors[0]
    assert not (tmp_path / "run").exists()


def test_sigterm_on_the_cli_cancels_keeps_finished_points_stops_its_cluster_and_resume_completes(tmp_path):
    """The CLI starts its own local cluster; SIGTERM while a point hangs: exit 143 within
    seconds, the finished point kept, the cluster and its workers gone; --resume completes."""
    ray_tmp = tempfile.mkdtemp(prefix="ar", dir="/tmp")  # short: Ray's socket paths must fit
    out = tmp_path / "run"
    cmd = CLI + ["--max-len", "256", "--out", str(out), "--point-timeout", "600"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=cli_env(ray_tmp, hook="sdpa@128=hang"))
    try:
        deadline = time.monotonic() + 120
        while len(read_records(out)) < 1 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert len(read_records(out)) == 1, proc.communicate(timeout=30)[1][-2000:] if proc.poll() is not None else ""
        time.sleep(3)  # the n=128 point is running (hanging) by now
        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("attnprof-point" in " ".join(p.cmdline()) for p in family if alive([p]))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # the point hangs for an hour: an exit means it was cancelled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "--resume" in err
    assert [r["seq_len"] for r in read_records(out)] == [64]
    deadline = time.monotonic() + 30
    while alive(family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(family) == [], "Ray processes of the interrupted sweep are still running"
    try:
        done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300, env=cli_env(ray_tmp))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    keys = [key_of_record(r) for r in read_records(out)]
    assert len(keys) == len(set(keys)) == 3


def gone(pid: int, wait_s: float = 30.0) -> bool:
    """Whether process ``pid`` has exited (or is a zombie), waiting up to ``wait_s`` for it."""
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    try:
        proc.wait(timeout=wait_s)
    except psutil.TimeoutExpired:
        pass
    return not alive([proc])


def alive(processes: list[psutil.Process]) -> list[str]:
    out = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.name())
        except psutil.NoSuchProcess:
            pass
    return out
