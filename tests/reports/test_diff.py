"""The baseline comparison (reports.diff.compare): regressions, improvements, noise, and one judge with the gate."""

import pandas as pd
import pytest

from attnprof.reports.data import load, tidy
from attnprof.reports.diff import compare

from conftest import ci_records, synthetic_record, write_run


def test_compare_flags_regressions_improvements_and_noise(tmp_path):
    base = load(write_run(tmp_path / "base", ci_records())).frame
    changed = []
    for r in ci_records():
        key = (r.variant, r.mode, r.seq_len)
        if key == ("sdpa", "plain", 512):
            r = synthetic_record("sdpa", "plain", 512, scale=1.005)  # +0.5% memory and time: within tolerance
        elif key == ("lsh", "reversible", 256):
            r = synthetic_record("lsh", "reversible", 256, scale=0.5)  # half: an improvement
        elif key == ("sdpa", "plain", 1024):
            r = synthetic_record("sdpa", "plain", 1024, status="timeout", reason="> 120 s")
        changed.append(r.to_row())
    run = tidy(pd.DataFrame(changed))
    diff = compare(run, base)
    verdict = {(r.series, r.panel, r.seq_len): r.verdict for r in diff.itertuples()}
    assert verdict[("sdpa", "plain", 512)] == "same"
    assert verdict[("lsh", "reversible", 256)] == "improvement"
    assert verdict[("sdpa", "plain", 1024)] == "regression"
    assert sum(v != "same" for v in verdict.values()) == 2
    assert list(diff["verdict"])[:2] == ["regression", "improvement"]  # changes first


def test_compare_lists_points_only_one_run_has(tmp_path):
    base = load(write_run(tmp_path / "base", ci_records(variants=("full", "sdpa")))).frame
    run = load(write_run(tmp_path / "run", ci_records(variants=("sdpa", "lsh")))).frame
    counts = compare(run, base)["verdict"].value_counts()
    assert counts["new"] == 9 and counts["gone"] == 9 and counts["same"] == 9


def one_point_run(path, peak: int, time_ms: float = 3.0):
    r = synthetic_record("sdpa", "plain", 256)
    r.predicted_peak_bytes = r.measured_peak_bytes = peak
    r.time_fwd_ms, r.time_bwd_ms = time_ms / 3, 2 * time_ms / 3
    return write_run(path, [r])


# (baseline bytes, current bytes): around 2% of a large figure and the 64 KiB floor of a small one
CHANGES = [(10_000_000, 10_150_000), (10_000_000, 10_199_000), (10_000_000, 10_201_000), (10_000_000, 9_790_000),
           (1_000_000, 1_030_000), (1_000_000, 1_065_000), (1_000_000, 1_066_000), (1_000_000, 930_000)]


@pytest.mark.parametrize("old, new", CHANGES)
def test_the_report_and_the_gate_judge_memory_alike(tmp_path, old, new):
    """One judge (profiler.gate.verdict): the report calls a regression exactly when the gate fails."""
    from attnprof.profiler.gate import compare as gate_compare, update_baseline

    base_dir, run_dir = one_point_run(tmp_path / "base", old), one_point_run(tmp_path / "run", new)
    baseline = tmp_path / "baseline.json"
    update_baseline(baseline, base_dir)
    gate = gate_compare(baseline, run_dir)
    (verdict,) = compare(load(run_dir).frame, load(base_dir).frame)["verdict"]
    assert (verdict == "regression") == (gate.exit_code == 1)
    assert (verdict == "improvement") == bool(gate.improvements)
    assert verdict in ("regression", "improvement", "same")


@pytest.mark.parametrize("factor, verdict", [(1.5, "slower"), (0.5, "faster"), (1.05, "same"), (20.0, "slower")])
def test_time_is_slower_or_faster_never_a_regression(tmp_path, factor, verdict):
    base, run = one_point_run(tmp_path / "base", 10_000_000), one_point_run(tmp_path / "run", 10_000_000, 3.0 * factor)
    assert list(compare(load(run).frame, load(base).frame)["verdict"]) == [verdict]
