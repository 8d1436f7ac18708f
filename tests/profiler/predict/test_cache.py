"""The persistent prediction cache: a hit is the prediction itself, read back instead of
recomputed; every entry that is not trustworthy is moved aside and predicted again; an unwritable
folder costs a warning line, never the prediction; --no-cache bypasses it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from attnprof.profiler.predict import cache
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

POINT = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=128, d_model=32, heads=4, layers=5))


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd, acc.method


def entries(root: Path) -> list[Path]:
    return sorted((root / "predictions").glob("*.json"))


def test_the_suite_never_touches_the_users_cache(prediction_cache_dir):
    assert cache.cache_dir() == prediction_cache_dir == Path(os.environ[cache.ENV])
    assert Path.home() / ".cache" not in cache.cache_dir().parents


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "attnprof"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "attnprof"
    monkeypatch.setenv(cache.ENV, str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_a_repeated_prediction_is_read_back(prediction_cache_dir, monkeypatch):
    first = predict(POINT)
    assert not first.cached and len(entries(prediction_cache_dir)) == 1
    monkeypatch.setattr("attnprof.profiler.predict.fake_run.trace_point",
                        lambda *a, **k: pytest.fail("traced a point the cache had"))
    again = predict(POINT)
    assert again.cached and figures(again) == figures(first)
    assert predict(POINT, count_flops=False).flops_fwd == 0  # the same entry serves both


def test_the_key_holds_versions_source_point_and_options(monkeypatch):
    key = cache.key_of(Point("lsh[n_hashes=4]", "plain", "model", POINT.shape))
    import torch

    from attnprof import __version__

    assert key["torch"] == torch.__version__ and key["attnprof"] == __version__
    assert key["source"] == cache.source_digest() and len(key["source"]) == 64
    assert key["point"] == list(Point("lsh[n_hashes=4]", "plain", "model", POINT.shape).key())
    assert key["options"]["n_hashes"] == 4 and key["options"]["bucket_size"] == 64  # defaults resolved
    assert key["plugin"] is None
    other = [cache.key_of(Point("sdpa", "plain", "model", POINT.shape.with_len(256))),
             cache.key_of(Point("sdpa", "checkpoint", "model", POINT.shape)), cache.key_of(POINT)]
    assert len({json.dumps(k, sort_keys=True) for k in other}) == 3


@pytest.mark.parametrize("change", ["torch", "attnprof", "source"])
def test_another_version_or_source_is_a_miss(monkeypatch, change):
    predict(POINT)
    if change == "torch":
        monkeypatch.setattr("torch.__version__", "0.0.0")
    elif change == "attnprof":
        monkeypatch.setattr("attnprof.__version__", "0.0.0")
    else:
        monkeypatch.setattr(cache, "source_digest", lambda: "0" * 64)
    assert not predict(POINT).cached


def corrupt_garbage(path):
    path.write_bytes(b"\x00\xffnot json")


def corrupt_truncated(path):
    path.write_text(path.read_text()[:40])


def corrupt_checksum(path):
    data = json.loads(path.read_text())
    data["value"]["peak_bytes"] += 1  # a figure changed behind the checksum's back
    path.write_text(json.dumps(data))


def corrupt_consistently(path):
    """A wrong figure with a matching checksum: the schema check still refuses a bool."""
    data = json.loads(path.read_text())
    data["value"]["peak_bytes"] = True
    data["checksum"] = cache.checksum(data["key"], data["value"])
    path.write_text(json.dumps(data))


def corrupt_foreign(path):
    """Another point's entry under this point's file name."""
    data = json.loads(path.read_text())
    data["key"]["point"][0] = "full"
    data["checksum"] = cache.checksum(data["key"], data["value"])
    path.write_text(json.dumps(data))


def corrupt_extra_field(path):
    data = json.loads(path.read_text())
    data["value"]["note"] = "hello"
    data["checksum"] = cache.checksum(data["key"], data["value"])
    path.write_text(json.dumps(data))


def corrupt_not_a_dict(path):
    path.write_text("[1, 2, 3]")


@pytest.mark.parametrize("corrupt", [corrupt_garbage, corrupt_truncated, corrupt_checksum, corrupt_consistently,
                                     corrupt_foreign, corrupt_extra_field, corrupt_not_a_dict])
def test_an_untrustworthy_entry_is_kept_aside_and_predicted_again(prediction_cache_dir, corrupt, capsys):
    """Never delete what cannot be parsed: the entry is renamed beside itself, byte for byte, with
    one warning line, and the fresh prediction is written under its name (it was overwritten)."""
    first = predict(POINT)
    (path,) = entries(prediction_cache_dir)
    corrupt(path)
    damaged = path.read_bytes()
    cache.reset_warnings()
    again = predict(POINT)
    assert not again.cached and figures(again) == figures(first)
    [aside] = [p for p in path.parent.iterdir() if ".unreadable-" in p.name]
    assert aside.read_bytes() == damaged and aside.name.startswith(path.name)
    [line] = capsys.readouterr().err.splitlines()
    assert str(path) in line and f"kept as {aside.name}" in line
    assert predict(POINT).cached  # written anew: trusted again
    assert json.loads(path.read_text())["value"]["peak_bytes"] == first.peak_bytes


def test_an_unwritable_cache_folder_is_a_warning_not_a_failure(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    monkeypatch.setenv("ATTNPROF_CACHE_WARNED", "")
    cache.reset_warnings()
    acc = predict(POINT)
    predict(Point("sdpa", "checkpoint", "model", POINT.shape))
    err = capsys.readouterr().err.strip().splitlines()
    assert acc.peak_bytes > 0 and not acc.cached
    assert len(err) == 1 and err[0].startswith("warning: cache folder ") and "under a file" in err[0], err


def test_no_cache_neither_reads_nor_writes(prediction_cache_dir):
    with cache.disabled():
        assert not predict(POINT).cached
    assert entries(prediction_cache_dir) == []
    predict(POINT)
    with cache.disabled():
        assert not predict(POINT).cached
    assert predict(POINT).cached


def test_exact_predictions_bypass_the_cache(prediction_cache_dir):
    predict(POINT, exact=True)
    assert entries(prediction_cache_dir) == []


PLUGIN = '''
from attnprof.scenarios.variants.sdpa import SDPAttention


class Mine(SDPAttention):
    pass
'''


def test_a_plug_in_is_keyed_by_its_files_content(tmp_path, monkeypatch):
    (tmp_path / "my_attention_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    point = Point("my_attention_plugin:Mine", "plain", "model", POINT.shape)
    key = cache.key_of(point)
    assert key["plugin"] and len(key["plugin"]) == 64
    assert not predict(point).cached and predict(point).cached
    (tmp_path / "my_attention_plugin.py").write_text(PLUGIN + "\n# changed\n")
    assert cache.key_of(point)["plugin"] != key["plugin"]
    assert not predict(point).cached
    sys.modules.pop("my_attention_plugin", None)


@pytest.mark.slow
def test_the_cli_repeats_a_prediction_from_the_cache_and_no_cache_bypasses_it(prediction_cache_dir):
    import subprocess

    cmd = [sys.executable, "-m", "attnprof", "predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "128",
           "--d-model", "32", "--heads", "4", "--layers", "5", "--json"]
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    again = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    bypass = json.loads(subprocess.run(cmd + ["--no-cache"], capture_output=True, text=True, check=True).stdout)
    assert [r["prediction_cached"] for r in (first[0], again[0], bypass[0])] == [False, True, False]
    assert first[0]["predicted_peak_bytes"] == again[0]["predicted_peak_bytes"] == bypass[0]["predicted_peak_bytes"]
    assert len(entries(prediction_cache_dir)) == 1


def test_a_key_that_cannot_be_made_is_a_miss_not_an_error(tmp_path, monkeypatch):
    """A plug-in whose options raise an OSError while the key is made: load answered with an
    UnboundLocalError (the entry's path was never set) once unreadable entries were moved aside."""
    (tmp_path / "oserr_attention_plugin.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Mine(FullAttention):\n"
        "    @classmethod\n"
        "    def resolve_options(cls, options):\n"
        "        raise PermissionError(13, 'Permission denied', '/etc/mine.conf')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert cache.load(Point("oserr_attention_plugin:Mine", "plain", "model", POINT.shape)) is None
    finally:
        sys.modules.pop("oserr_attention_plugin", None)


def test_an_entry_is_moved_aside_only_while_it_is_the_file_that_was_read(prediction_cache_dir):
    """Two processes that read one bad entry: the second must not move aside the fresh entry
    the first wrote meanwhile (safeio.move_aside's identity)."""
    from attnprof.profiler.safeio import Replaced, move_aside

    predict(POINT)
    (path,) = entries(prediction_cache_dir)
    read_before = (path.stat().st_dev, path.stat().st_ino)
    fresh = path.with_name("fresh")
    fresh.write_text(path.read_text())
    os.replace(fresh, path)  # what a writer does: a new file under the name
    with pytest.raises(Replaced):
        move_aside(path, read_before)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing moved, nothing lost
