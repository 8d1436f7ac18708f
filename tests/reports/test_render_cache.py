"""The report's render caches in a run folder (reports.render_cache): round trips under this
code's versions tag, stale entries dropped silently, hostile entries ignored and counted
in one line, and writes that never follow a planted link."""

import json
import os

import pytest

from attnprof.profiler import safeio
from attnprof.profiler.memmodel.gpu_peak import GPU_FIELDS
from attnprof.profiler.predict.cache import versions_tag
from attnprof.reports.render_cache import (CACHE_FILE, GPU_CACHE_FILE, clean_fields, peak_problem, read_cache,
                                           read_gpu_cache, warning, write, write_cache)


def gpu_fields(**kw):
    return {**{k: None for k in GPU_FIELDS}, "gpu_total_bytes": 1 << 30, "gpu_fits": True, **kw}


def test_predictions_round_trip_under_this_codes_versions_tag(tmp_path):
    write_cache(tmp_path, {"full|plain|256": 1234, "sdpa|plain|256": 995})
    doc = json.loads((tmp_path / CACHE_FILE).read_text())
    assert list(doc) == [versions_tag()]
    assert read_cache(tmp_path) == ({"full|plain|256": 1234, "sdpa|plain|256": 995}, None)


def test_stale_entries_are_left_out_without_a_problem(tmp_path):
    (tmp_path / CACHE_FILE).write_text(json.dumps({"another-tag": {"k": 10}, "k-of-the-old-layout": 5}))
    assert read_cache(tmp_path) == ({}, None)


BYTE_COUNT = "predicted_peak_bytes must be a byte count (an integer >= 0)"


@pytest.mark.parametrize("value, fragment", [(-1, BYTE_COUNT), (0, "must be > 0 (no prediction is 0 bytes)"),
                                             (float("nan"), BYTE_COUNT), (float("inf"), BYTE_COUNT),
                                             (1e300, BYTE_COUNT), (1.5, BYTE_COUNT), (1 << 63, BYTE_COUNT),
                                             (True, BYTE_COUNT), ("12", BYTE_COUNT), ([1], BYTE_COUNT)])
def test_a_peak_that_is_no_byte_count_is_named(value, fragment):
    """Checked as a result's predicted_peak_bytes is (gate.checks), and never 0."""
    assert fragment in peak_problem(value)
    assert peak_problem(1) is None and peak_problem((1 << 63) - 1) is None


@pytest.mark.parametrize("text", ["-1", "NaN", "Infinity", "-Infinity", "0", "1.5", "1e3"])
def test_a_hostile_peak_in_the_file_is_ignored_and_named(tmp_path, text):
    """Issue 40, item 5: read from the file as JSON text (Python's json reads NaN and Infinity)."""
    (tmp_path / CACHE_FILE).write_text(f'{{"{versions_tag()}": {{"good": 10, "bad": {text}}}}}')
    good, problem = read_cache(tmp_path)
    assert good == {"good": 10} and problem.startswith("1 of 2 entries invalid (first: 'bad': ")


def test_invalid_entries_are_ignored_and_counted_in_one_line(tmp_path):
    (tmp_path / CACHE_FILE).write_text(json.dumps({versions_tag(): {"good": 10, "bad": -1, "worse": "x"}}))
    good, problem = read_cache(tmp_path)
    assert good == {"good": 10}
    assert problem.startswith("2 of 3 entries invalid (first: 'bad': ") and "\n" not in problem


@pytest.mark.parametrize("content, fragment", [(b"{not json", "not valid JSON"), (b"[1, 2]", "not a JSON object"),
                                               (b"\xff\xfe", "not UTF-8 text"),
                                               (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")])
def test_an_unusable_file_is_a_reason_not_an_exception(tmp_path, content, fragment):
    for name, read in ((CACHE_FILE, read_cache), (GPU_CACHE_FILE, read_gpu_cache)):
        (tmp_path / name).write_bytes(content)
        good, problem = read(tmp_path)
        assert good == {} and fragment in problem


def test_gpu_fields_are_kept_only_when_they_are_the_models(tmp_path):
    assert clean_fields(gpu_fields())["gpu_fits"] is True
    for bad in (gpu_fields(gpu_total_bytes=0), gpu_fields(gpu_fits="yes"), gpu_fields(gpu_total_bytes=[1]), []):
        assert clean_fields(bad) is None
    some_float_field = next(k for k in GPU_FIELDS if k not in ("gpu_total_bytes", "gpu_fits"))
    assert clean_fields(gpu_fields(**{some_float_field: float("inf")})) is None
    for name in ("gpu_allocated_peak_bytes", "gpu_reserved_peak_bytes", "gpu_tensor_peak_bytes"):  # issue 40
        for bad in (-1, 1.5, float("nan"), "1"):
            assert clean_fields(gpu_fields(**{name: bad})) is None, (name, bad)
        assert clean_fields(gpu_fields(**{name: 0}))[name] == 0
    assert clean_fields(gpu_fields(gpu_time_fwd_ms=-2.0)) is None and clean_fields(gpu_fields(gpu_time_fwd_ms=2.0))
    assert clean_fields({**gpu_fields(), "gpu_evil": "x"}) == gpu_fields()  # unknown names are dropped
    (tmp_path / GPU_CACHE_FILE).write_text(json.dumps({"fp": {"a": gpu_fields(), "b": {"gpu_fits": 1}}, "fq": 3}))
    out, problem = read_gpu_cache(tmp_path)
    assert out == {"fp": {"a": gpu_fields()}}
    assert problem.startswith("2 of 3 entries invalid")


def test_nothing_is_written_without_a_folder_or_anything_to_write(tmp_path):
    write(None, CACHE_FILE, {"k": 1})
    write(tmp_path, CACHE_FILE, {})
    assert not (tmp_path / CACHE_FILE).exists()
    write(tmp_path, CACHE_FILE, {}, force=True)  # a bad file to replace
    assert json.loads((tmp_path / CACHE_FILE).read_text()) == {}
    assert read_cache(None) == ({}, None) and read_gpu_cache(tmp_path / "absent") == ({}, None)


def test_a_planted_link_is_refused_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(target, run / CACHE_FILE)
    with pytest.raises(safeio.LinkRefused):
        write_cache(run, {"k": 1})
    with pytest.raises(safeio.LinkRefused):
        read_cache(run)
    assert target.read_text() == "keep"


def test_the_warning_names_the_file_and_keeps_it_beside_the_new_one(tmp_path):
    """A cache file the report cannot use was rewritten (garbage a user put there became {}):
    now it is renamed beside itself, byte for byte, and the line names where."""
    (tmp_path / CACHE_FILE).write_bytes(b"MY NOTES \xff")
    line = warning(tmp_path, CACHE_FILE, "bad")
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith(CACHE_FILE + ".unreadable-")]
    assert line == f"warning: {tmp_path / CACHE_FILE}: bad; ignored (kept as {aside.name}), and a new file written without it"
    assert aside.read_bytes() == b"MY NOTES \xff" and not (tmp_path / CACHE_FILE).exists()
    assert warning(tmp_path, CACHE_FILE, "bad").endswith("ignored (it is gone), and a new file written without it")
