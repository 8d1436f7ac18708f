"""The 23 points measured on a real H200, predicted again: every claim of
profiler/hardware/checked.toml (what `predict --gpu` and the report say about how sure the
GPU models are) must hold on them, so no change to the models drifts from a real GPU unseen."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from attnprof.profiler.hardware.checked import BUILTIN_FILE, builtin_checks, load_checks
from attnprof.profiler.hardware.gpus import ENV_VAR, get_gpu
from attnprof.profiler.predict.measured_gpu import claim_problems, claimed_ranges, compare, load_measured


@pytest.fixture(scope="module")
def measured_and_rows():
    """Per check: (check, environment, measured points, compare()'s rows); ~5 s per check."""
    out = []
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(ENV_VAR, raising=False)  # the built-in GPU table, never a user's
        for check in builtin_checks():
            env, measured = load_measured(check.measurements_path())
            out.append((check, env, measured, compare(measured, get_gpu(check.gpu))))
    return out


def test_there_is_a_check_and_it_names_the_committed_measurements(measured_and_rows):
    assert measured_and_rows
    for check, env, measured, rows in measured_and_rows:
        assert len(rows) == len(measured) == check.points


def test_every_claim_of_the_checks_file_holds_on_its_measured_points(measured_and_rows):
    for check, env, measured, rows in measured_and_rows:
        assert claim_problems(check, env, measured, rows) == []


def test_the_stated_ranges_cover_what_the_models_give_today(measured_and_rows):
    for check, env, measured, rows in measured_and_rows:
        ranges = claimed_ranges(rows)
        for name, (lo, hi) in check.ratios.items():
            assert lo <= ranges[name][0] and ranges[name][1] <= hi
        assert ranges["time_median_off"] <= check.time_median_off


def test_a_tightened_claim_in_a_copy_of_the_file_is_caught(measured_and_rows, tmp_path):
    check, env, measured, rows = measured_and_rows[0]
    text = re.sub(r"(?m)^allocated = \[.*\]$", "allocated = [0.95, 0.99]", BUILTIN_FILE.read_text(), count=1)
    text = re.sub(r"(?m)^time_median_off = .*$", "time_median_off = 0.0", text, count=1)
    (tmp_path / "checked.toml").write_text(text)
    tight = load_checks(tmp_path / "checked.toml")[0]
    problems = claim_problems(tight, env, measured, rows)
    assert any("allocated measured/model" in p and "outside the claimed 0.95-0.99" in p for p in problems)
    assert any(p.startswith("median |time ratio - 1|") for p in problems)


def test_a_claim_of_kinds_sizes_or_versions_not_measured_is_caught(measured_and_rows):
    check, env, measured, rows = measured_and_rows[0]
    wider = replace(check, memory_kinds=check.memory_kinds + ("full model reversible bfloat16",),
                    sizes={**check.sizes, "seq_len": (1024, 65536)}, torch="2.12.0")
    problems = claim_problems(wider, env, measured, rows)
    assert any(p.startswith("memory_kinds") for p in problems)
    assert any(p.startswith("sizes.seq_len") for p in problems)
    assert any(p.startswith("torch is '2.12.0'") for p in problems)
    assert claim_problems(replace(check, points=check.points + 1), env, measured, rows)
