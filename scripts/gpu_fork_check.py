#!/usr/bin/env python3
"""Which of the sweep's warm-up steps leave a forked child able to use the GPU (issue 38 item 1).

    python scripts/gpu_fork_check.py --out forks.json [--dry-run]

One process runs, in order, what a process that forks GPU workers might run first; after each
step it counts its threads, asks ``forks.fork_hazard`` whether it may fork (the rule attnprof
follows), then forks a child that runs a forward and backward on the device and says how it
ended. The steps:

1. ``import``: torch and the worker's modules (what the warm helper imports).
2. ``warm_up``: ``runner.preload.warm_up()``, what the helper runs today before it forks a
   worker per point.
3. ``symbolic_shapes``: ``import torch.fx.experimental.symbolic_shapes`` (sympy with it), what
   ``torch.autograd.grad`` imports on its first call, so what a reversible point's backward
   costs each CUDA worker (0.25-0.3 s on 2 cores, measured on torch 2.11; ``step_s`` here is
   the GPU machine's figure). An import only, judged before the fake trace that broke the
   first GPU's children, so that a failing ``fake_forward`` cannot leave it unjudged.
4. ``fake_forward``: ``fake_run.warm_fake_tensors(forward_only=True)``, the step that started
   the CUDA driver on the first GPU (../shared/gpu-runs/h200-2026-12-04/call2-fork-diag.txt):
   FakeTensorMode's ``__enter__`` called ``torch._C._ensureCUDADeviceGuardSet()``, which
   attnprof's fake mode now skips (profiler/measure/quickfake.py). A child that ends ok here
   is what the helper needs to warm fake tensors on a CUDA build again (each CUDA worker
   then no longer pays for FakeTensorMode's imports where its prediction was not cached).
5. ``fake_backward``: the same trace with a backward. Expected to start the driver on a GPU
   (autograd's ``Engine::start_device_threads`` counts the devices): the helper never runs
   it, and the check shows that the thread rule sees it.

The rule is right when it never says "fork" before a child that fails. Exit 1 when it did, or
when a step the helper runs (``import``, ``warm_up``) fails or leaves the child failing. ``--dry-run``
(a CPU machine: CI) runs the same steps with the children on the CPU. Ends with one
``HEADLINE: ...`` line (scripts/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
from pathlib import Path

CHILD_TIMEOUT_S = 8.0  # well inside the stage's 30 s, so a hang is reported, not cut
HELPER_STEPS = ("import", "warm_up")  # what runner/preload.py runs on a CUDA build before it forks
# steps the helper could run on a CUDA build once a GPU shows a child forked after them working (in order)
CANDIDATES = {"symbolic_shapes": "importing torch.fx.experimental.symbolic_shapes",
              "fake_forward": "a forward-only fake warm-up"}
# (no torch._dynamo step: no sweep process imports it, runner/worker.py measures under fakemode.light_dynamo)


def child_step(device: str) -> str:
    """In the forked child: a forward and backward on ``device``; one line on how it ended."""
    try:
        import torch

        x = torch.ones(8, 8, device=device, requires_grad=True)
        (x @ x).sum().backward()
        if device != "cpu":
            torch.cuda.synchronize()
        return "ok"
    except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
        from attnprof.profiler.runner.failures import failure_reason

        return f"FAIL {failure_reason(exc)}"


def fork_child(device: str, timeout_s: float = CHILD_TIMEOUT_S) -> str:
    """Fork a child that runs ``child_step``; its line, or why there is none."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        os.close(r)
        try:
            os.write(w, child_step(device).encode("utf-8", "replace"))
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout_s)
    said = os.read(r, 1000).decode("utf-8", "replace") if ready else ""
    os.close(r)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not ready:
        return f"FAIL hung: no answer in {timeout_s:g} s"
    if not said:
        return f"FAIL died: wait status {status}"
    return said


def threads() -> int | None:
    from attnprof.profiler.forks import thread_count

    return thread_count()


def steps():
    """(name, function) in order; each runs in this process."""
    def imports():
        import torch  # noqa: F401

        from attnprof.profiler.runner import worker  # noqa: F401

    def warm_up():
        from attnprof.profiler.runner import preload

        preload.warm_up()

    def fake(forward_only: bool):
        def run():
            import torch

            from attnprof.profiler.predict.fake_run import warm_fake_tensors

            torch.set_num_threads(1)
            warm_fake_tensors(forward_only=forward_only)
        return run

    def symbolic_shapes():
        import torch.fx.experimental.symbolic_shapes  # noqa: F401  (sympy with it)

    return [("import", imports), ("warm_up", warm_up), ("symbolic_shapes", symbolic_shapes),
            ("fake_forward", fake(True)), ("fake_backward", fake(False))]


def check(device: str) -> list[dict]:
    from attnprof.profiler.forks import fork_hazard
    from attnprof.profiler.runner.failures import failure_reason

    rows = []
    for name, fn in steps():
        t0 = time.perf_counter()
        try:
            fn()
            error = None
        except Exception as exc:  # noqa: BLE001 - a failing step is a finding, the next steps still run
            error = failure_reason(exc)
        step_s = time.perf_counter() - t0
        hazard = fork_hazard()
        row = {"step": name, "step_s": round(step_s, 3), "step_error": error, "threads": threads(),
               "fork_hazard": hazard, "child": fork_child(device)}
        row["rule_wrong"] = hazard is None and row["child"] != "ok"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def headline(rows: list[dict], device: str) -> tuple[str, int]:
    parts = []
    for row in rows:
        said = "child ok" if row["child"] == "ok" else f"child {row['child']}"
        rule = "rule: fork" if row["fork_hazard"] is None else "rule: no fork"
        parts.append(f"{row['step']}: {said} ({row['threads']} thread(s), {rule})")
    wrong = [r["step"] for r in rows if r["rule_wrong"]]
    helper_broken = [r["step"] for r in rows if r["step"] in HELPER_STEPS and (r["child"] != "ok" or r["step_error"])]
    refused = [r["step"] for r in rows if r["step"] in HELPER_STEPS and r["fork_hazard"] is not None]
    verdict = []
    if refused:
        verdict.append(f"the rule refuses to fork after the helper's own steps ({', '.join(refused)}): "
                       f"every CUDA point would start a fresh interpreter")
    if wrong:
        verdict.append(f"THE THREAD RULE SAID FORK BEFORE A FAILING CHILD at {', '.join(wrong)}")
    if helper_broken:
        verdict.append(f"the helper's own steps break a child: {', '.join(helper_broken)}")
    if device == "cpu":
        verdict.append("CPU children say nothing of a GPU's driver")
    else:
        broken = None  # the steps run in one process: a candidate after one that broke the child is not judged
        for row in rows:
            what = CANDIDATES.get(row["step"])
            if what is None:
                continue
            if broken is not None:
                verdict.append(f"{what}: not judged (the child already failed after {broken})")
            elif row["step_error"]:
                verdict.append(f"{what} failed itself: {row['step_error']}")
            elif row["child"] == "ok" and row["fork_hazard"] is None:
                verdict.append(f"{what} is fork-safe here")
            else:
                verdict.append(f"{what} is NOT fork-safe here")
            if broken is None and (row["child"] != "ok" or row["fork_hazard"] is not None):
                broken = row["step"]
    where = "dry run, children on the CPU" if device == "cpu" else "children on the GPU"
    return f"{where}; " + "; ".join(parts) + "; " + "; ".join(verdict), int(bool(wrong or helper_broken))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    ap.add_argument("--dry-run", action="store_true", help="children on the CPU (a machine without a GPU)")
    args = ap.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    rows = check(device)
    line, rc = headline(rows, device)
    import torch

    doc = {"what": "each warm-up step, this process's threads, attnprof's fork rule, and a forked child's "
                   "forward+backward on the device (scripts/gpu_fork_check.py)",
           "device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "steps": rows}
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"HEADLINE: {line}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
