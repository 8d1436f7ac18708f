#!/usr/bin/env python3
"""How fast a sweep stops when it is told to: the seconds from SIGTERM to the exit of
``attnprof sweep`` while a point hangs (the test hook ``sdpa@128=hang`` sleeps for an hour),
with the local executor and, when Ray is installed and ``--ray`` is given, with
``--executor ray``. Goals: local <= 5 s, ray <= 15 s.

    .venv/bin/python scripts/bench_interrupt.py [--rounds 3] [--ray]

A benchmark, not a test: that SIGTERM stops the wait at all (exit 143, the worker killed,
the finished point kept, --resume completing) is tested in tests/profiler/runner/
test_reliability.py and executors/test_ray_cluster.py; how fast it does so depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"local": 5.0, "ray": 15.0}
SWEEP = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
         "--max-len", "256", "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0",
         "--device", "cpu", "--no-report", "--quiet", "--point-timeout", "600"]


def records(out: Path) -> int:
    try:
        return sum(1 for line in (out / "results.jsonl").read_text().splitlines() if line.strip())
    except OSError:
        return 0


def one_round(executor: str) -> float:
    """Seconds from SIGTERM to exit, once the hanging point is running."""
    work = Path(tempfile.mkdtemp(prefix="ai", dir="/tmp"))  # short: Ray's socket paths must fit
    env = {**os.environ, "ATTNPROF_TEST_HOOK": "sdpa@128=hang", "RAY_TMPDIR": str(work)}
    env.pop("RAY_ADDRESS", None)
    out = work / "run"
    proc = subprocess.Popen([*SWEEP, "--out", str(out), "--executor", executor], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while records(out) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if records(out) < 1:
            raise SystemExit(f"{executor}: the first point never finished: {proc.communicate()[1][-2000:]}")
        time.sleep(2)  # the n=128 point is running (hanging) by now
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
        return time.perf_counter() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per executor (median of them)")
    parser.add_argument("--ray", action="store_true", help="also time --executor ray (needs Ray)")
    args = parser.parse_args()
    executors = ["local"] + (["ray"] if args.ray else [])
    ok, rows = True, {}
    print(f"{'executor':<10} {'median s':>9} {'max s':>7}  goal")
    for executor in executors:
        samples = [one_round(executor) for _ in range(args.rounds)]
        median, goal = statistics.median(samples), GOALS[executor]
        ok &= median <= goal
        rows[executor] = samples
        print(f"{executor:<10} {median:9.2f} {max(samples):7.2f}  <= {goal}  {'ok' if median <= goal else 'MISSED'}")
    print(json.dumps({"sigterm_to_exit_s": rows}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
