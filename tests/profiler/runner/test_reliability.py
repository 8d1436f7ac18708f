"""Hostile conditions, with real processes and real signals: the sweep as a user runs it
(``python -m attnprof sweep``), killed, terminated, raced, starved of disk, and fed run
folders it must not trust."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from attnprof.profiler.runner.storage import LOCK_FILE, RESULTS_FILE, read_records, read_records_checked

pytestmark = pytest.mark.slow

SWEEP = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
         "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu",
         "--no-report", "--quiet"]
HANG_TIMEOUT = ["--point-timeout", "600"]  # a hanging point must hang for the whole test


def sweep_cmd(out: Path, max_len: int = 256, *extra: str) -> list[str]:
    return SWEEP + ["--max-len", str(max_len), "--out", str(out), *extra]


def run(cmd: list[str], hook: str = "", timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "ATTNPROF_TEST_HOOK": hook})


def start(cmd: list[str], hook: str = "") -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "ATTNPROF_TEST_HOOK": hook})


def wait_until(predicate, what: str, timeout: float = 120.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the sweep exited ({proc.returncode}) before {what}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def running_worker(proc: subprocess.Popen):
    """The sweep's helper and the worker forked from it, once a point is running."""
    def found():
        family = tree(proc.pid)
        helpers = [p for p in family if p.ppid() == proc.pid]
        workers = [p for p in family if helpers and p.ppid() == helpers[0].pid]
        return family if workers else None
    return wait_until(found, "a worker running a point", proc=proc)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def valid_file(path: Path) -> list[dict]:
    """Every line a valid record, ending in a newline; the records."""
    records, problems = read_records_checked(path.parent)
    assert problems == [], problems
    data = path.read_bytes()
    assert data.endswith(b"\n") and all(line.strip() for line in data.splitlines())
    return records


def distinct_lengths(out: Path) -> list[int]:
    lengths = [r["seq_len"] for r in read_records(out)]
    assert len(lengths) == len(set(lengths)), lengths
    return sorted(lengths)


# --- nothing left running ------------------------------------------------------------------
def test_sigkill_of_the_sweep_leaves_no_process_behind(tmp_path):
    out = tmp_path / "run"
    proc = start(sweep_cmd(out, 256, *HANG_TIMEOUT), hook="sdpa@64=hang")
    family = running_worker(proc)
    assert len(family) == 2  # the warm helper and the hanging worker; no forkserver, no resource tracker
    proc.kill()  # the main process only: no handler can see this
    proc.communicate(timeout=30)  # returns only once nothing holds its stdout/stderr any more
    wait_until(lambda: not alive(family), "the helper and the worker to die", timeout=5)
    assert [f.name for f in alive(family)] == []


def test_a_worker_dies_with_its_helper_and_the_sweep_goes_on(tmp_path):
    """SIGKILL the warm helper mid-point (in-process sweep): its worker dies with it, the
    point is recorded as crashed, a fresh helper runs the rest."""
    import threading

    from attnprof.profiler.runner.isolation import HELPER_MODULE
    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
    from attnprof.scenarios.scenario import Scenario

    victims: list[psutil.Process] = []
    trouble: list[str] = []

    def helper_with_a_worker() -> list[psutil.Process]:
        """[the helper, its worker], or [] while there is none. Every child is asked on its
        own: one that ended meanwhile (a zombie left by an earlier test, e.g. Ray's) has no
        command line, and psutil says so with an exception."""
        for child in psutil.Process().children():
            try:
                if HELPER_MODULE in " ".join(child.cmdline()) and (workers := child.children()):
                    return [child, *workers]
            except psutil.Error:
                continue
        return []

    def kill_helper_once_the_worker_runs():
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if found := helper_with_a_worker():
                    victims.extend(found)
                    found[0].kill()
                    return
                time.sleep(0.05)
            trouble.append("no helper with a worker within 120 s")
        except Exception as exc:  # said in the assertion below, not lost in a thread
            trouble.append(repr(exc))

    killer = threading.Thread(target=kill_helper_once_the_worker_runs, daemon=True)
    killer.start()
    sc = Scenario(name="t", variants=("sdpa",), modes=("plain",), min_len=64, max_len=256, d_model=32, heads=2,
                  layers=1, repeats=1, warmup=0)
    # the point hangs until the helper is killed; if the killer fails, the timeout ends it in 3 minutes, not 10
    settings = SweepSettings(device="cpu", warmup=0, repeats=1, point_timeout_s=180.0, test_hook="sdpa@64=hang")
    run_sweep(sc, tmp_path, settings, show_progress=False)
    killer.join(timeout=5)
    assert not trouble, trouble
    assert len(victims) == 2 and not alive(victims)
    records = {r["seq_len"]: r for r in read_records(tmp_path)}
    assert records[64]["status"] == "crashed" and "helper process died" in records[64]["reason"]
    assert records[128]["status"] == records[256]["status"] == "ok"


def test_a_second_writer_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    first = start(sweep_cmd(out, 256, *HANG_TIMEOUT), hook="sdpa@64=hang")
    try:
        wait_until(lambda: (out / LOCK_FILE).exists() and (out / LOCK_FILE).read_text().strip() == str(first.pid),
                   "the first sweep to lock the folder", proc=first)
        for extra in ([], ["--resume"]):
            second = run(sweep_cmd(out, 256, *extra))
            errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
            assert second.returncode == 2, second.stderr
            assert len(errors) == 1 and "being written by another sweep" in errors[0] and str(first.pid) in errors[0]
            assert "Traceback" not in second.stderr
    finally:
        first.kill()
        first.communicate(timeout=30)


# --- SIGTERM like Ctrl-C -------------------------------------------------------------------
def test_sigterm_while_a_point_hangs_stops_at_once_and_resume_completes(tmp_path):
    out = tmp_path / "run"
    cmd = sweep_cmd(out, 256, *HANG_TIMEOUT)
    proc = start(cmd, hook="sdpa@128=hang")
    wait_until(lambda: len(read_records(out)) == 1, "the first point", proc=proc)
    family = running_worker(proc)
    proc.send_signal(signal.SIGTERM)  # the main process only, as `kill PID` or a job scheduler does
    # The point hangs for an hour and --point-timeout is 10 minutes: an exit within the bound
    # means the signal stopped the wait (how fast: scripts/bench_interrupt.py).
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "Exception ignored" not in err
    interrupted = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert len(interrupted) == 1 and "--resume" in interrupted[0], err
    assert not alive(family)
    assert distinct_lengths(out) == [64]
    done = run(cmd + ["--resume"])
    assert done.returncode == 0, done.stderr
    assert distinct_lengths(out) == [64, 128, 256]


# --- torn records --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real 4-point run (n = 64..512), copied by each test that needs one."""
    out = tmp_path_factory.mktemp("finished") / "run"
    done = run(sweep_cmd(out, 512))
    assert done.returncode == 0, done.stderr
    return out


def copy_run(finished_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out


def test_a_torn_last_line_is_moved_aside_on_resume(finished_run, tmp_path):
    out = copy_run(finished_run, tmp_path)
    path = out / RESULTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    path.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # killed mid-write of the 4th
    done = run(sweep_cmd(out, 512, "--resume"))
    assert done.returncode == 0, done.stderr
    assert "torn last line" in done.stderr and "Traceback" not in done.stderr
    [aside] = [json.loads(e) for e in (out / "results.quarantine.jsonl").read_text().splitlines()]
    assert aside["line"] == 4 and not aside["newline"]
    assert base64.b64decode(aside["raw_base64"]) == lines[3][: len(lines[3]) // 2]
    records = valid_file(path)
    assert len(records) == 4 and distinct_lengths(out) == [64, 128, 256, 512]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 200 KiB tmpfs (root only), unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path) -> Path:
    """Take every free byte of the file system."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_disk_full_stops_in_one_line_with_a_valid_file_and_resume_completes(small_tmpfs):
    out = small_tmpfs / "run"
    cmd = SWEEP[:SWEEP.index("--variant") + 1] + ["sdpa,full"] + SWEEP[SWEEP.index("--mode"):] + \
        ["--min-len", "16", "--max-len", "256", "--out", str(out)]  # 10 points of about 1.1 KB each
    proc = start(cmd)
    wait_until(lambda: read_records(out), "the first record", proc=proc)
    filler = fill(small_tmpfs)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "--resume" in errors[0], err
    assert "Traceback" not in err
    kept = valid_file(out / RESULTS_FILE)
    assert 1 <= len(kept) < 10
    filler.unlink()
    done = run(cmd + ["--resume"])
    assert done.returncode == 0, done.stderr
    assert len(valid_file(out / RESULTS_FILE)) == 10


# --- untrusted run folders -----------------------------------------------------------------
EVIL = '''import pathlib
pathlib.Path({marker!r}).write_text("imported")
from attnprof.scenarios.variants.full import FullAttention as Evil
'''


def test_resume_quarantines_invalid_lines_imports_nothing_and_completes(finished_run, tmp_path):
    out = copy_run(finished_run, tmp_path)
    path = out / RESULTS_FILE
    good = path.read_text().splitlines()
    evil_record = {**json.loads(good[0]), "variant": "evil_plugin_for_test:Evil"}
    (tmp_path / "plugins").mkdir()
    marker = tmp_path / "imported.txt"
    (tmp_path / "plugins" / "evil_plugin_for_test.py").write_text(EVIL.format(marker=str(marker)))
    bad = [b"\x00\xff\xfe binary", b"[1, 2, 3]", json.dumps({**json.loads(good[0]), "variant": ["a"]}).encode(),
           json.dumps({k: v for k, v in json.loads(good[0]).items() if k != "d_model"}).encode(),
           json.dumps({**json.loads(good[0]), "seq_len": None}).encode(), b"[" * 200_000 + b"]" * 200_000]
    lines = [good[0].encode(), *bad, json.dumps(evil_record).encode(), good[1].encode(), good[2].encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")  # the n=512 record is gone: resume must measure it
    manifest = (out / "manifest.json").read_text()
    (out / "manifest.json").write_text('{"settings": [1, 2], "scenario": ')  # torn manifest: refused
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), os.environ.get("PYTHONPATH", "")]),
           "ATTNPROF_TEST_HOOK": ""}
    done = subprocess.run(sweep_cmd(out, 512, "--resume"), capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "manifest.json" in done.stderr, done.stderr
    assert path.read_bytes() == b"\n".join(lines) + b"\n"  # refused before anything changed
    (out / "manifest.json").write_text(manifest)
    done = subprocess.run(sweep_cmd(out, 512, "--resume"), capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "moved 6 invalid line(s)" in warnings[0] and "line 2, 3, 4, 5, 6, 7" in warnings[0]
    assert not marker.exists(), "a variant label read from results.jsonl was imported"
    records, problems = read_records_checked(out)
    assert problems == [] and sorted(r["seq_len"] for r in records if r["variant"] == "sdpa") == [64, 128, 256, 512]
    aside = [json.loads(e) for e in (out / "results.quarantine.jsonl").read_text().splitlines()]
    assert [e["line"] for e in aside] == [2, 3, 4, 5, 6, 7]
    assert [base64.b64decode(e["raw_base64"]) for e in aside] == bad  # byte for byte
    assert "JSON nested too deeply" in aside[-1]["reason"] and "variant expected a string" in aside[2]["reason"]
    assert json.loads((out / "manifest.json").read_text())["scenario"]["variants"] == ["sdpa"]


CRASHING = '''import os, signal
from attnprof.scenarios.variants.full import FullAttention


class Crash(FullAttention):
    def core(self, q, k, v):
        with open({marker!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        os.kill(os.getpid(), signal.SIGSEGV)
'''


def test_a_plugin_that_segfaults_costs_its_own_points_only_and_never_runs_in_the_sweeps_process(tmp_path):
    """A plug-in's code runs in its point's process only: the sweep's own predictions (the ETA,
    a record it writes for a point whose worker died, the report's capacity) are for built-in variants. Before, the
    sweep predicted the plug-in's point itself, and died with it (exit 139, sdpa's points lost)."""
    (tmp_path / "plugins").mkdir()
    marker = tmp_path / "ran_in.txt"
    (tmp_path / "plugins" / "crash_plugin_for_test.py").write_text(CRASHING.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), os.environ.get("PYTHONPATH", "")]),
           "ATTNPROF_TEST_HOOK": ""}
    out = tmp_path / "run"
    cmd = [a for a in sweep_cmd(out, 128, "--variant", "crash_plugin_for_test:Crash") if a != "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    assert (out / "report.html").is_file()  # its capacity phase predicts built-in variants only
    assert "Traceback" not in stderr
    ran_in = {int(line) for line in marker.read_text().split()}
    assert ran_in and proc.pid not in ran_in  # the plug-in ran, in its points' processes only
    records = valid_file(out / RESULTS_FILE)
    assert sorted(r["seq_len"] for r in records if r["variant"] == "sdpa" and r["status"] == "ok") == [64, 128]
    crashed = [r for r in records if r["variant"] == "crash_plugin_for_test:Crash"]
    assert crashed and all(r["status"] == "crashed" and "SIGSEGV" in r["reason"] for r in crashed)
    assert len(ran_in) == len(crashed)  # one process per point; none of the report's capacity predictions


def test_infinite_or_nan_point_timeout_is_one_line_exit_2(tmp_path):
    for value in ("inf", "nan"):
        done = run(sweep_cmd(tmp_path / "run", 64, "--point-timeout", value), timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
        assert not (tmp_path / "run" / RESULTS_FILE).exists()
