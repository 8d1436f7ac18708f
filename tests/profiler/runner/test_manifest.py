"""A run folder's manifest (profiler/runner/manifest.py): what ran, where and how, written
atomically; a resume keeps its creation time and adds its own; a resume on another device
or with another scenario is refused in one line, with fields that change no point
(repeats, warm-up, the point timeout) left free."""

from __future__ import annotations

import json

import pytest

from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.manifest import check_manifest_readable, check_resumable, write_manifest
from attnprof.profiler.runner.storage import MANIFEST_FILE
from attnprof.profiler.runner.sweep import SweepSettings
from attnprof.scenarios.scenario import Scenario

SC = Scenario(name="tiny", variants=("sdpa",), modes=("plain",), min_len=64, max_len=128, d_model=32, heads=2,
              layers=1, repeats=1, warmup=0)


def test_the_manifest_says_what_ran_and_a_resume_keeps_its_creation_time(tmp_path):
    settings = SweepSettings(device="cpu", test_hook="sdpa=oom")
    first = write_manifest(tmp_path, SC, settings, cluster={"executor": "local", "slots": 1})
    on_disk = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert on_disk["format"] == "attnprof-run" and on_disk["scenario"] == SC.to_dict()
    assert on_disk["cluster"] == {"executor": "local", "slots": 1} and "test_hook" not in on_disk["settings"]
    assert on_disk["environment"]["device"] == "cpu" and on_disk["environment"]["device_name"]
    assert settings.device_name == on_disk["settings"]["device_name"] == on_disk["environment"]["device_name"]
    again = write_manifest(tmp_path, SC, settings)
    assert again["created_at"] == first["created_at"] and len(again["resumed_at"]) == 1
    assert len(write_manifest(tmp_path, SC, settings)["resumed_at"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_FILE]  # no temporary file left


def test_a_resume_may_change_what_changes_no_point_but_nothing_else(tmp_path):
    write_manifest(tmp_path, SC, SweepSettings(device="cpu"))
    check_resumable(tmp_path, SC.override(repeats=5, warmup=2), "cpu")
    with pytest.raises(SweepError, match="it was run with d_model=32, now 64"):
        check_resumable(tmp_path, SC.override(d_model=64), "cpu")
    with pytest.raises(SweepError, match="on cuda: it was measured on 'cpu'"):
        check_resumable(tmp_path, SC, "cuda")
    check_resumable(tmp_path, SC, "auto")  # a cluster's device: checked once it is resolved


def test_without_a_manifest_the_records_say_the_device(tmp_path):
    check_resumable(tmp_path, SC, "cpu", records=[{"device": "cpu"}])
    with pytest.raises(SweepError, match="measured on 'cuda'"):
        check_resumable(tmp_path, SC, "cpu", records=[{"device": "cuda"}])


def test_a_corrupt_manifest_is_refused_with_the_way_out(tmp_path):
    assert check_manifest_readable(tmp_path) == {}
    (tmp_path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(SweepError, match="cannot resume .*move it aside"):
        check_manifest_readable(tmp_path)
