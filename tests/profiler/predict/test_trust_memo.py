"""A passed internals check is kept in the cache folder and recalled by later processes
(profiler/predict/trust_memo.py); anything but an exact entry of the same key is not trusted,
and is never overwritten."""

from __future__ import annotations

import json
import os

import pytest
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure import internals
from attnprof.profiler.measure.quickfake import QuickFakeTensorMode
from attnprof.profiler.predict import cache, trust_memo
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

POINT = Point("sdpa", "plain", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=1, dtype="bfloat16"))


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """A process that has not decided yet, counting the checks it runs."""
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    memo = QuickFakeTensorMode.swap_memo({})
    internals.reset_for_tests()
    trust_memo.install()
    runs = []
    real = internals.check
    monkeypatch.setattr(internals, "check", lambda: runs.append(1) or real())
    yield runs
    internals.reset_for_tests()
    QuickFakeTensorMode.swap_memo(memo)


def a_new_process():
    internals.reset_for_tests()


def test_a_passed_check_is_recalled_by_the_next_process(fresh):
    assert internals.trusted() and len(fresh) == 1
    path = trust_memo.path_of(trust_memo.key())
    assert json.loads(path.read_text()) == {"key": trust_memo.key(), "trusted": True}
    a_new_process()
    assert internals.trusted() and len(fresh) == 1  # recalled: no second check
    assert predict(POINT, exact=False).peak_bytes == predict(POINT, exact=True).peak_bytes


def test_another_source_checks_again(fresh, monkeypatch):
    assert internals.trusted()
    a_new_process()
    monkeypatch.setattr(cache, "source_digest", lambda: "0" * 64)  # attnprof's source changed
    assert internals.trusted() and len(fresh) == 2


def test_a_failed_check_is_not_kept(fresh, monkeypatch, capsys):
    monkeypatch.setattr(internals, "tiny_trace", lambda mode_cls: (_ for _ in ()).throw(RuntimeError("changed")))
    assert internals.trusted() is False
    assert not trust_memo.path_of(trust_memo.key()).exists()
    assert "differ" in capsys.readouterr().err


@pytest.mark.parametrize("planted", ['{"key": {}, "trusted": true}', '{"trusted": true}', "not json", "link"])
def test_a_foreign_entry_is_not_trusted_and_left_alone(fresh, planted, tmp_path):
    path = trust_memo.path_of(trust_memo.key())
    path.parent.mkdir(parents=True, exist_ok=True)
    if planted == "link":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"key": trust_memo.key(), "trusted": True}))
        os.symlink(target, path)
        before = target.read_text()
    else:
        path.write_text(planted)
    assert internals.trusted() and len(fresh) == 1  # checked, not recalled
    a_new_process()
    assert internals.trusted() and len(fresh) == 2  # still not recalled: nothing was overwritten
    if planted == "link":
        assert os.path.islink(path) and target.read_text() == before
    else:
        assert path.read_text() == planted


def test_no_cache_neither_reads_nor_writes(fresh):
    with cache.disabled():
        assert internals.trusted()
        a_new_process()
        assert internals.trusted() and len(fresh) == 2
    assert not trust_memo.path_of(trust_memo.key()).exists()


def test_the_key_names_torch_build_and_source():
    k = trust_memo.key()
    assert k["source"] == cache.source_digest() and k["torch"] == cache.torch_version()
    assert len(k["torch_files"]) == 64 and isinstance(k["backward"], bool) and k["verdict"] == trust_memo.SCHEMA


def test_the_torch_digest_reads_the_named_files(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    for root, text in ((one, "as shipped"), (other, "changed")):
        (root / "_subclasses").mkdir(parents=True)
        (root / trust_memo.TORCH_FILES[0]).write_text(text)
    assert trust_memo.torch_files_digest(one) != trust_memo.torch_files_digest(other)
