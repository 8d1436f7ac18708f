#!/usr/bin/env python3
"""How long `attnprof predict` takes, in units of `python -c "import torch"` on the same
machine in the same run (interleaved rounds, medians), so a busy machine slows all alike:

- one tiny point:   predict --variant sdpa --mode plain --seq-len 256 --d-model 64 --heads 2 --layers 1
- 18 points at 64K: predict --d-model 1024 --heads 16 --layers 12 --dtype bf16   (the six variants the
                    goals were set for x the three modes; sliding_window, added later, is left out so
                    the figure stays comparable)
- the frontier:     the same with --budget 80GiB (18 series, longest power of two that fits)

Headline figures start from an empty prediction cache (a fresh ATTNPROF_CACHE_DIR per
run) that holds only this install's internals verdict (profiler/predict/trust_memo.py: a
passed check of torch's fake-tensor internals, kept once per torch build and attnprof
source, as any earlier run leaves it); the "first run" figures start from nothing at all,
as the very first prediction after installing or upgrading does, check included; the warm
figures repeat the same command on the cache the cold run left. attnprof's bytecode is
compiled once before the rounds (a development checkout has none until Python writes it).
Goals: tiny <= 1.5x,
18 points <= 2.5x, frontier <= 6x (cold).

    .venv/bin/python scripts/bench_predict.py [--rounds 3] [--skip-frontier] [--extra "--optimizer adamw"]

An ``--extra`` with ``--precision`` replaces the cases' ``--dtype bf16`` (the two would disagree).

``--against CHECKOUT`` (another attnprof checkout, e.g. a ``git worktree`` of the commit a
goal was set at): each case also runs on that code, without ``--extra`` (it may predate
the options), from a cold cache, in the same rounds, imported through PYTHONPATH; the
table adds each case's median over that one's. The ratio to ``import torch`` moves with
the machine (docs/accounting.md: the goal's own commit measured 2.36x on one VM and 2.67x
on a slower one); the ratio to the same cases on the goal's code, run alongside, does not.

A benchmark, not a test: the exactness of every fast prediction is tested in
tests/profiler/predict/test_compose.py. Prints the load average (os.getloadavg) before
and after, and the machine's cores: other work on the machine shows up in the spread.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the attnprof package: the repository root
SIX = "full,sdpa,lsh,talking_heads,sparse_strided,sparse_fixed"  # the built-ins when the goals were set
MODEL = ["--variant", SIX, "--d-model", "1024", "--heads", "16", "--layers", "12", "--dtype", "bf16"]
CASES = {  # name -> (attnprof predict arguments, goal in units of import torch)
    "tiny point": (["--variant", "sdpa", "--mode", "plain", "--seq-len", "256", "--d-model", "64", "--heads", "2",
                    "--layers", "1"], 1.5),
    "18 points at 64K": (MODEL, 2.5),
    "frontier 80GiB, 18 series": (MODEL + ["--budget", "80GiB"], 6.0),
}


def _without_dtype(argv: list[str]) -> list[str]:
    """``argv`` less its ``--dtype X`` (an ``--extra --precision`` says the dtype itself)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--dtype":
            skip = True
        else:
            out.append(a)
    return out


def _fake_point() -> list[str]:
    """A point predicted through fake tensors (bfloat16: not a small point): its run leaves
    this install's internals verdict in the cache folder."""
    return ["--variant", "sdpa", "--mode", "plain", "--seq-len", "256", "--d-model", "64", "--heads", "2",
            "--layers", "1", "--dtype", "bf16"]


def attnprof_command() -> list[str]:
    script = Path(sys.executable).parent / "attnprof"
    return [str(script)] if script.exists() else [sys.executable, "-m", "attnprof"]


def wall_s(cmd: list[str], cache: str | None = None, pythonpath: str | None = None) -> float:
    env = dict(os.environ)
    if cache is not None:
        env["ATTNPROF_CACHE_DIR"] = cache
    if pythonpath is not None:  # --against: that checkout's package first on the path
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median of each)")
    parser.add_argument("--skip-frontier", action="store_true", help="leave out the --budget case (the slowest)")
    parser.add_argument("--extra", default="", help="predict arguments added to every case, e.g. '--optimizer adamw'")
    parser.add_argument("--against", default="", help="another attnprof checkout: every case also runs there, "
                                                      "without --extra, and the table compares (module docstring)")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    against = Path(args.against).resolve() if args.against else None
    if against is not None and not (against / "__init__.py").is_file():
        print(f"error: --against {args.against}: not an attnprof checkout (no __init__.py there)", file=sys.stderr)
        return 2
    cases = {k: (_without_dtype(argv) if "--precision" in extra else argv) + extra for k, (argv, goal) in CASES.items()
             if not (args.skip_frontier and "frontier" in k)}
    cases = {k: (argv, CASES[k][1]) for k, argv in cases.items()}
    predict = [*attnprof_command(), "predict"]
    torch_cmd = [sys.executable, "-c", "import torch"]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnprof-bench-") as tmp:
        wall_s(torch_cmd)  # warm the file cache and .pyc files; not counted
        # attnprof's own bytecode, as Python caches it on first import by default (an editable
        # install has none until then, and PYTHONDONTWRITEBYTECODE, set on some machines, would
        # leave every run compiling it again: measured ~0.3-0.7 s a run); torch's came with pip
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\]\.venv[/\\]", str(PACKAGE)],
                       check=True, stdout=subprocess.DEVNULL)
        warmup = os.path.join(tmp, "warmup")
        wall_s([*predict, *_fake_point()], cache=warmup)
        other = None  # --against: a folder whose "attnprof" is that checkout, for PYTHONPATH
        if against is not None:
            other = os.path.join(tmp, "against")
            os.makedirs(other)
            os.symlink(against, os.path.join(other, "attnprof"))
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\]\.venv[/\\]", str(against)],
                           check=True, stdout=subprocess.DEVNULL)
            wall_s([sys.executable, "-m", "attnprof", "predict", *_fake_point()], cache=os.path.join(tmp, "w2"),
                   pythonpath=other)
        verdicts = os.path.join(warmup, "verdicts")  # this install's internals verdict (module docstring)
        times: dict[str, list[float]] = {"python -c 'import torch'": []}
        for name in cases:
            times[name] = []
            times[name + " (first run)"] = []
            times[name + " (warm cache)"] = []
            if other is not None:
                times[name + " (against)"] = []
        for r in range(args.rounds):
            times["python -c 'import torch'"].append(wall_s(torch_cmd))
            for i, (name, (argv, _)) in enumerate(cases.items()):
                times[name + " (first run)"].append(wall_s([*predict, *argv], cache=os.path.join(tmp, f"first{r}-{i}")))
                cache = os.path.join(tmp, f"round{r}-case{i}")  # no prediction cached: a cold cache
                if os.path.isdir(verdicts):
                    shutil.copytree(verdicts, os.path.join(cache, "verdicts"))
                times[name].append(wall_s([*predict, *argv], cache=cache))
                times[name + " (warm cache)"].append(wall_s([*predict, *argv], cache=cache))
                if other is not None:  # the same case, without --extra, on the other checkout
                    times[name + " (against)"].append(wall_s(
                        [sys.executable, "-m", "attnprof", "predict", *CASES[name][0]],
                        cache=os.path.join(tmp, f"against{r}-{i}"), pythonpath=other))
    load_after = os.getloadavg()
    torch_s = statistics.median(times["python -c 'import torch'"])
    ok = True
    print(f"{'command':<40} {'median s':>9} {'min s':>7} {'max s':>7} {'x torch':>8}  goal")
    for name, samples in times.items():
        median = statistics.median(samples)
        goal = cases.get(name, (None, None))[1]
        ratio = median / torch_s
        verdict = "" if goal is None else (f"<= {goal}  " + ("ok" if ratio <= goal else "MISSED"))
        ok &= goal is None or ratio <= goal
        print(f"{name:<40} {median:9.2f} {min(samples):7.2f} {max(samples):7.2f} {ratio:8.2f}  {verdict}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if other is not None:
        print(f"\nagainst {against} (each case without --extra):")
        for name in cases:
            print(f"  {name}: {statistics.median(times[name]) / statistics.median(times[name + ' (against)']):.2f}x "
                  f"that code's time")
    print(f"\n{args.rounds} rounds; {cores} cores; load average (1, 5, 15 min) before "
          f"{', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load_after)}")
    print("commands: attnprof predict " + " | ".join(" ".join(argv) for argv, _ in cases.values()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
