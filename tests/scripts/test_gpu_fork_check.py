"""scripts/gpu_fork_check.py: the GPU check's `forks` stage (run here with its children on the CPU:
the steps, the record and the verdict, not a GPU's driver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_fork_check.py"


@pytest.fixture
def fork_check():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_fork_check
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gpu_fork_check


@pytest.mark.slow
def test_a_dry_run_records_every_step_and_a_child_after_each(tmp_path):
    out = tmp_path / "forks.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu"
    assert [r["step"] for r in doc["steps"]] == ["import", "warm_up", "symbolic_shapes", "fake_forward", "fake_backward"]
    for row in doc["steps"]:
        assert row["child"] == "ok" and row["step_error"] is None and not row["rule_wrong"]
        assert row["threads"] >= 1 and row["step_s"] >= 0
    last = done.stdout.splitlines()[-1]
    assert last.startswith("HEADLINE: dry run, children on the CPU; import: child ok")
    assert "CPU children say nothing of a GPU's driver" in last


def row(step, child="ok", hazard=None, error=None):
    return {"step": step, "step_s": 0.1, "step_error": error, "threads": 1, "fork_hazard": hazard, "child": child,
            "rule_wrong": hazard is None and child != "ok"}


def test_the_verdict_fails_when_the_rule_said_fork_before_a_failing_child(fork_check):
    """What the first GPU showed (the fake warm-up broke every child) is caught, and the rule's
    "no fork" before a failing child is no failure of the rule."""
    failing = "FAIL AcceleratorError: CUDA error: initialization error"
    line, rc = fork_check.headline([row("import"), row("warm_up"), row("fake_forward", child=failing),
                                    row("fake_backward", child=failing, hazard="2 threads")], "cuda")
    assert rc == 1 and "THE THREAD RULE SAID FORK BEFORE A FAILING CHILD at fake_forward" in line
    assert "a forward-only fake warm-up is NOT fork-safe here" in line
    line, rc = fork_check.headline([row("import"), row("warm_up"), row("fake_forward"),
                                    row("fake_backward", child=failing, hazard="2 threads")], "cuda")
    assert rc == 0 and "a forward-only fake warm-up is fork-safe here" in line and "RULE" not in line


def test_a_helper_step_that_breaks_a_child_fails_the_check(fork_check):
    line, rc = fork_check.headline([row("import"), row("warm_up", child="FAIL RuntimeError: x", hazard="2 threads"),
                                    row("fake_forward"), row("fake_backward")], "cuda")
    assert rc == 1 and "the helper's own steps break a child: warm_up" in line


def test_a_child_that_hangs_or_dies_is_reported_not_waited_for(fork_check, monkeypatch):
    monkeypatch.setattr(fork_check, "child_step", lambda device: time.sleep(60) or "ok")
    assert fork_check.fork_child("cpu", timeout_s=0.5) == "FAIL hung: no answer in 0.5 s"  # killed, not awaited
    monkeypatch.setattr(fork_check, "child_step", lambda device: os._exit(3))
    assert fork_check.fork_child("cpu", timeout_s=10).startswith("FAIL died")


def test_a_rule_that_refuses_to_fork_after_the_helpers_steps_is_said(fork_check):
    """Not a failure (every point still runs, in a fresh interpreter), but the sweep slows: said."""
    line, rc = fork_check.headline([row("import"), row("warm_up", hazard="this process runs 2 threads"),
                                    row("fake_forward"), row("fake_backward")], "cuda")
    assert rc == 0 and "the rule refuses to fork after the helper's own steps (warm_up)" in line
    line, _ = fork_check.headline([row("import"), row("warm_up"), row("fake_forward", error="RuntimeError: x"),
                                   row("fake_backward")], "cuda")
    assert "a forward-only fake warm-up failed itself: RuntimeError: x" in line


def test_the_sympy_import_is_judged_even_where_the_fake_trace_breaks_the_child(fork_check):
    """The import runs before the fake trace (the steps accumulate in one process), so the step that
    broke the first GPU's children cannot leave it unjudged."""
    failing = "FAIL AcceleratorError: CUDA error: initialization error"
    line, _ = fork_check.headline([row("import"), row("warm_up"), row("symbolic_shapes"),
                                   row("fake_forward", child=failing), row("fake_backward", child=failing)], "cuda")
    assert "importing torch.fx.experimental.symbolic_shapes is fork-safe here" in line
    assert "a forward-only fake warm-up is NOT fork-safe here" in line


def test_each_candidate_step_gets_its_own_verdict(fork_check, monkeypatch):
    """A candidate may join the helper on a CUDA build only where its own child ended ok under a
    rule that said fork; the steps accumulate in one process, so a candidate after one that broke
    the child is not judged (a second candidate, "later", stands in for the next one)."""
    monkeypatch.setitem(fork_check.CANDIDATES, "later", "a later step")
    failing = "FAIL AcceleratorError: CUDA error: initialization error"
    line, rc = fork_check.headline([row("import"), row("warm_up"), row("fake_forward"),
                                    row("later", child=failing, hazard="2 threads"),
                                    row("fake_backward", child=failing, hazard="2 threads")], "cuda")
    assert rc == 0 and "a forward-only fake warm-up is fork-safe here" in line
    assert "a later step is NOT fork-safe here" in line
    line, rc = fork_check.headline([row("import"), row("warm_up"), row("fake_forward", child=failing),
                                    row("later", child=failing), row("fake_backward", child=failing)], "cuda")
    assert rc == 1 and "a forward-only fake warm-up is NOT fork-safe here" in line
    assert "a later step: not judged (the child already failed after fake_forward)" in line
