"""Variant option labels survive the round trip: sweep -> results -> report -> gate."""

import json

import pytest

from attnprof.profiler.gate import run_gate
from attnprof.profiler.runner.storage import load_run
from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
from attnprof.reports.render import render_report
from attnprof.scenarios.scenario import Scenario

LABELS = ["lsh[n_hashes=1]", "lsh[n_hashes=4,bucket_size=32]", "sparse_fixed[summary=4,combine=multihead]"]


@pytest.mark.slow
def test_labels_round_trip(tmp_path):
    sc = Scenario(name="labels", variants=tuple(LABELS), modes=("plain",), seq_lens=(256,), d_model=32, heads=4,
                  layers=1, repeats=1, warmup=0)
    run = tmp_path / "run"
    run_sweep(sc, run, SweepSettings(device="cpu", repeats=1, warmup=0, test_hook=""), show_progress=False)
    frame = load_run(run)
    assert sorted(frame["variant"]) == sorted(LABELS) and set(frame["status"]) == {"ok"}
    # two configurations of one variant never collide
    peaks = dict(zip(frame["variant"], frame["measured_peak_bytes"]))
    assert peaks["lsh[n_hashes=1]"] != peaks["lsh[n_hashes=4,bucket_size=32]"]

    html = render_report(run, seconds=0).read_text()
    for label in LABELS:
        assert label in html

    baseline, result = tmp_path / "baseline.json", tmp_path / "gate.json"
    lines = []
    assert run_gate(baseline, run, update=True, out=lines.append) == 0
    assert run_gate(baseline, run, json_file=result, out=lines.append) == 0
    text = "\n".join(map(str, lines))
    stored = json.loads(baseline.read_text())
    for label in LABELS:
        assert label in text
        assert label in {p["variant"] for p in stored["points"]}
        assert label in result.read_text()
