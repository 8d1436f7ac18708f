"""`attnprof report` and `attnprof gate` never run code a results file, baseline or
manifest names. A canary plug-in module that leaves a marker file when imported sits
on sys.path, in the working directory and in the run folder; a run labels its points
`canary_mod:Evil`. Rendering, gating and writing a baseline from that run must leave
no marker, while importing the module (the control) does."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import MANIFEST, synthetic_record, write_run

pytestmark = pytest.mark.slow  # a few subprocesses, each importing pandas and matplotlib

LABELS = ("canary_mod:Evil", "canary_mod:Evil[causal=false]", "canary_mod")
CANARY = textwrap.dedent('''
    import pathlib
    pathlib.Path({marker!r}).write_text("canary_mod was imported")
    from attnprof.scenarios.variants.full import FullAttention

    class Evil(FullAttention):
        """Looks like a plug-in; importing it is the harm."""
''')


def attnprof(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "attnprof", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_report_and_gate_never_import_a_module_a_label_names(tmp_path):
    marker = tmp_path / "IMPORTED"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    records = [synthetic_record(label, mode, n) for label in LABELS for mode in ("plain", "checkpoint")
               for n in (256, 512)]
    manifest = {**MANIFEST, "scenario": {**MANIFEST["scenario"], "variants": list(LABELS)}}
    run = write_run(tmp_path / "run", records, manifest)
    other = write_run(tmp_path / "other", records, manifest)
    for folder in (plugins, run, other):
        (folder / "canary_mod.py").write_text(CANARY.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}
    baseline = tmp_path / "baseline.json"

    steps = [("report", run), ("report", run, "--baseline", other),
             ("gate", "--update", "--baseline", baseline, run), ("gate", "--baseline", baseline, run),
             ("gate", "--baseline", baseline, other)]
    for args in steps:
        done = attnprof(*args, cwd=run, env=env)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        assert not marker.exists(), f"attnprof {' '.join(map(str, args))} imported canary_mod"
    text = (run / "report.html").read_text(encoding="utf-8")
    assert "canary_mod:Evil[causal=false]" in text and "is not a built-in variant" in text
    assert {p["variant"] for p in json.loads(baseline.read_text())["points"]} == set(LABELS)

    control = subprocess.run([sys.executable, "-c", "import canary_mod"], cwd=run, env=env, capture_output=True)
    assert control.returncode == 0 and marker.exists(), "the canary should fire when imported"
