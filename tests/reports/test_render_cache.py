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
    write_cache(tmp_path, {"full|plain|256": 1234, "sdpa|plain|256": 99.5})
    doc = json.loads((tmp_path / CACHE_FILE).read_text())
    assert list(doc) == [versions_tag()]
    assert read_cache(tmp_path) == ({"full|plain|256": 1234, "sdpa|plain|256": 99.5}, None)


def test_stale_entries_are_left_out_without_a_problem(tmp_path):
    (tmp_path / CACHE_FILE).write_text(json.dumps({"another-tag": {"k": 10}, "k-of-the-old-layout": 5}))
    assert read_cache(tmp_path) == ({}, None)


@pytest.mark.parametrize("value, fragment", [(-1, "is not a byte count > 0"), (0, "is not a byte count > 0"),
                                             (float("nan"), "is not a byte count > 0"), (1e300, "byte count"),
                                             (True, "bool where a byte count belongs"),
                                             ("12", "str where a byte count belongs")])
def test_a_peak_that_is_no_byte_count_is_named(value, fragment):
    assert fragment in peak_problem(value)


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


def test_the_warning_names_the_file_and_says_it_is_rewritten(tmp_path):
    assert warning(tmp_path, CACHE_FILE, "bad") == (f"warning: {tmp_path / CACHE_FILE}: bad; ignored, "
                                                    "and the file rewritten without it")
