"""scripts/gpu_check.sh's stage list: each stage has its function, CI's dry run checks each one's line,
and the files it leaves in $OUT stay within the 8 that come back from the lent machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def stages() -> list[tuple[str, int, str]]:
    text = SCRIPT.read_text()
    order = re.search(r'^ORDER="([^"]*)"', text, re.M).group(1).split()
    return [(name, int(cap), fn) for name, cap, fn in (entry.split(":") for entry in order)]


def test_the_script_parses_and_every_stage_has_its_function():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    for name, cap, fn in stages():
        assert re.search(rf"^{re.escape(fn)}\(\) \{{", text, re.M), f"stage {name}: no function {fn}"
        assert 5 <= cap <= 300


def test_the_stages_come_in_the_issues_order_and_ci_checks_each_line():
    names = [name for name, _, _ in stages()]
    # forks (seconds) right after the environment: whether the sweep's workers can use the GPU at all
    assert names[:5] == ["environment", "forks", "sweep", "train", "long"] and names[-1] == "gpu-tests"
    assert names.index("models") < names.index("seconds") < names.index("probe") < names.index("timeline")
    ci = (ROOT / ".ci" / "run").read_text()
    listed = re.search(r"for stage in ([a-z\- ]+); do", ci).group(1).split()
    assert listed == names


def test_at_most_eight_files_are_named_for_out():
    text = SCRIPT.read_text()
    named = set(re.findall(r'\$OUT/([A-Za-z0-9_.-]+)', text)) - {"gpu-check.tgz.tmp", "timeline-pair.tgz.tmp"}
    named |= {"gpu-model.csv", "time-comparison.csv"}  # written by the python helpers into --out "$OUT"
    assert len(named) <= 8, sorted(named)


def test_every_stage_is_described_in_the_scripts_header_and_in_docs_gpu_md():
    """The header comment and docs/gpu.md's list are what a reader of summary.txt has to go by:
    a stage line they do not explain (the probe stage was added without either) is a figure
    nobody can read."""
    text = SCRIPT.read_text()
    header = text.split("\nset -uo pipefail", 1)[0]
    described = set(re.findall(r"^#   ([a-z][a-z\-]+) +\S", header, re.M))
    names = [name for name, _, _ in stages()]
    assert set(names) <= described, sorted(set(names) - described)
    docs = (ROOT / "docs" / "gpu.md").read_text()
    stage_list = docs.split("- Stages, most important figures first", 1)[1].split("\n- ", 1)[0]
    assert all(f"`{name}`" in stage_list for name in names), [n for n in names if f"`{n}`" not in stage_list]
