#!/usr/bin/env python3
"""How long attnprof makes a user wait before it does anything: the wall time of
``attnprof --help`` and ``attnprof variants`` against ``python -c "import torch"``, on the
same machine in the same run (interleaved rounds, medians), so a busy machine slows all
three alike. Goals: --help <= 0.25x and variants <= 0.6x of importing torch.

    .venv/bin/python scripts/bench_startup.py [--rounds 7] [--importtime]

``--importtime`` also prints the slowest imports of ``attnprof --help`` (python -X
importtime), the place to look when the ratio grows. A benchmark, not a test: the
behaviour it relies on (no torch/pandas/matplotlib at start-up) is tested in
tests/test_cli.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOALS = {"attnprof --help": 0.25, "attnprof variants": 0.6}


def attnprof_command() -> list[str]:
    script = Path(sys.executable).parent / "attnprof"
    return [str(script)] if script.exists() else [sys.executable, "-m", "attnprof"]


def wall_s(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def slowest_imports(top: int = 12) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the slowest imports of ``attnprof --help``."""
    cmd = [sys.executable, "-X", "importtime", "-c",
               "import sys; sys.argv = ['attnprof', '--help']; from attnprof.cli import main; main()"]
    err = subprocess.run(cmd, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median of each)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest imports of --help")
    args = parser.parse_args()
    attnprof = attnprof_command()
    commands = {"python -c 'import torch'": [sys.executable, "-c", "import torch"],
                "attnprof --help": [*attnprof, "--help"],
                "attnprof variants": [*attnprof, "variants"]}
    for cmd in commands.values():  # warm the file cache and .pyc files; not counted
        wall_s(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, cmd in commands.items():
            times[name].append(wall_s(cmd))
    torch_s = statistics.median(times["python -c 'import torch'"])
    ok = True
    print(f"{'command':<28} {'median s':>9} {'min s':>7} {'x torch':>8}  goal")
    for name, samples in times.items():
        median = statistics.median(samples)
        goal = GOALS.get(name)
        ratio = median / torch_s
        verdict = "" if goal is None else (f"<= {goal}  " + ("ok" if ratio <= goal else "MISSED"))
        ok &= goal is None or ratio <= goal
        print(f"{name:<28} {median:9.3f} {min(samples):7.3f} {ratio:8.2f}  {verdict}")
    if args.importtime:
        print("\nslowest imports of `attnprof --help` (cumulative ms):")
        for micros, name in slowest_imports():
            print(f"  {micros / 1e3:8.1f}  {name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
