"""The gate on real sweeps: a variant that starts keeping an extra copy of its scores
makes `attnprof gate` fail, naming the point; the unchanged variant passes."""

import subprocess
import sys
import textwrap

import pytest

from attnprof.profiler.gate import run_gate
from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
from attnprof.scenarios.scenario import Scenario

VARIANT_FILE = textwrap.dedent('''
    import torch
    from attnprof.scenarios.variants.full import FullAttention

    KEEP_EXTRA_COPY = {fat}
    _kept = []

    class Scores(FullAttention):
        """Test-only: full attention that may keep a copy of its scores alive."""
        description = "test-only full attention"
        paper = "none, arXiv 0000.00000"

        def core(self, q, k, v):
            scores = self.scores(q, k)
            if KEEP_EXTRA_COPY:
                _kept.append(scores.clone())  # the regression: n x n more bytes per call
            return torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)
''')


def sweep(tmp_path, name, fat):
    module_dir = tmp_path / name
    module_dir.mkdir()
    (module_dir / "gate_test_variant.py").write_text(VARIANT_FILE.format(fat=fat))
    sys.path.insert(0, str(module_dir))  # worker processes take the parent's sys.path
    try:
        sc = Scenario(name="gate-e2e", variants=("gate_test_variant:Scores", "sdpa"), modes=("plain",),
                      min_len=256, max_len=512, d_model=32, heads=2, layers=1, repeats=1, warmup=0)
        run_sweep(sc, tmp_path / f"run-{name}", SweepSettings(device="cpu", repeats=1, warmup=0, test_hook=""),
                  show_progress=False)
    finally:
        sys.path.remove(str(module_dir))
        sys.modules.pop("gate_test_variant", None)
    return tmp_path / f"run-{name}"


@pytest.mark.slow
def test_gate_fails_when_a_variant_keeps_an_extra_copy_of_its_scores(tmp_path):
    lean = sweep(tmp_path, "lean", fat=False)
    baseline = tmp_path / "baseline.json"
    lines = []
    assert run_gate(baseline, lean, update=True, out=lines.append) == 0
    assert run_gate(baseline, lean, out=lines.append) == 0
    fat = sweep(tmp_path, "fat", fat=True)
    lines.clear()
    assert run_gate(baseline, fat, out=lines.append) == 1
    text = "\n".join(str(line) for line in lines)
    assert "gate_test_variant:Scores" in text and "512" in text
    # the unchanged variant is not blamed
    regressed = [line for line in text.splitlines() if "REGRESS" in line.upper()]
    assert regressed and not any(line.lstrip().startswith("sdpa") for line in regressed)


@pytest.mark.slow
def test_gate_cli_exit_codes_on_a_real_run(tmp_path):
    lean = sweep(tmp_path, "lean", fat=False)
    baseline = tmp_path / "b.json"
    cli = [sys.executable, "-m", "attnprof", "gate", "--baseline", str(baseline)]
    assert subprocess.run(cli + ["--update", str(lean)], capture_output=True).returncode == 0
    assert subprocess.run(cli + [str(lean)], capture_output=True).returncode == 0
    baseline.write_text(baseline.read_text()[: len(baseline.read_text()) // 2])  # truncated
    bad = subprocess.run(cli + [str(lean)], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
