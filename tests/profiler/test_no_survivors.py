"""No process outlives its command: forked prediction workers die with their parent on
SIGKILL and SIGTERM, and SIGTERM anywhere is Ctrl-C (one "interrupted" line, exit 143).
Bounded parallelism: no more helpers than cores (CPU) or points."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from attnprof.profiler.forks import usable_cores
from attnprof.profiler.runner.executors.local import LocalExecutor
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.sweep import SweepSettings

pytestmark = pytest.mark.slow
# a budget search long enough to be caught with its workers running (7-10 s on 2 cores)
SEARCH = [sys.executable, "-m", "attnprof", "predict", "--d-model", "1024", "--heads", "16", "--layers", "12",
          "--dtype", "bf16", "--budget", "80GiB"]
# a pool whose steps never end: only a signal ends it
POOL = ("import time\nfrom attnprof.profiler.predict.pool import run_chains\n"
        "def step(task):\n    time.sleep(600 if task else 0)\n"
        "def chain(i):\n    yield i\n"
        "run_chains(step, [chain(i) for i in range(4)], workers=3)\n")


def children_of(proc: subprocess.Popen, at_least: int, timeout: float = 120) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        if len(kids) >= at_least:
            return kids
        if proc.poll() is not None:
            pytest.fail(f"exited ({proc.returncode}) before forking: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    pytest.fail("no worker was forked in time")


def survivors(kids: list[psutil.Process], timeout: float = 10) -> list[int]:
    gone, alive = psutil.wait_procs(kids, timeout=timeout)
    for p in alive:
        p.kill()
    return [p.pid for p in alive]


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_pools_workers_die_with_it(sig):
    proc = start([sys.executable, "-c", POOL])
    kids = children_of(proc, 2)
    os.kill(proc.pid, sig)
    proc.wait(30)
    assert survivors(kids) == []


def test_sigterm_mid_budget_search_is_ctrl_c_and_leaves_no_worker():
    proc = start(SEARCH)
    kids = children_of(proc, 1)
    time.sleep(0.5)  # the search under way (a SIGTERM during the fork itself: see the closing note of #26)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    assert survivors(kids) == []


def test_sigkill_mid_budget_search_leaves_no_worker():
    proc = start(SEARCH)
    kids = children_of(proc, 1)
    proc.kill()
    proc.wait(30)
    assert survivors(kids) == []


def test_parallel_is_capped_by_the_cores_and_by_the_points():
    warnings: list[str] = []
    executor = LocalExecutor(SweepSettings(device="cpu", parallel=1000), Interrupts(), warn=warnings.append)
    assert executor.slots == usable_cores()
    assert any("--parallel 1000 lowered to" in w for w in warnings)
    executor.open(points=1)
    try:
        assert executor.slots == 1 and len(executor.runners) == 1
        assert not any(r.alive for r in executor.runners)  # one point: its helper starts when it runs
        assert executor.lanes == [({}, {}, {"device": "cpu"})]  # and it times with torch's threads, as alone
        assert not any("share its cores" in w for w in warnings)  # no warning about slots that never run
    finally:
        executor.close()
