"""The cache folder (profiler/measure/cache_folder.py): where it is, whose it is, and
entries written whole."""

from __future__ import annotations

import os
import stat

from attnprof.profiler.measure import cache_folder


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cache_folder.ENV, str(tmp_path / "mine"))
    assert cache_folder.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(cache_folder.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder.cache_dir() == tmp_path / "xdg" / "attnprof"


def test_write_atomically_makes_a_private_folder_and_leaves_no_temporary(monkeypatch, tmp_path):
    monkeypatch.setenv(cache_folder.ENV, str(tmp_path / "c"))
    path = cache_folder.cache_dir() / "sub" / "entry.json"
    cache_folder.write_atomically(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    assert os.listdir(path.parent) == ["entry.json"]
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_a_folder_others_can_write_is_not_trusted(monkeypatch, tmp_path):
    monkeypatch.setenv(cache_folder.ENV, str(tmp_path / "c"))
    monkeypatch.delenv("ATTNPROF_CACHE_WARNED", raising=False)
    folder = cache_folder.cache_dir() / "predictions"
    folder.mkdir(parents=True)
    assert cache_folder.trusted(folder, warn=lambda line: None)
    os.chmod(folder, 0o777)
    said = []
    assert not cache_folder.trusted(folder, warn=said.append)
    assert len(said) == 1 and cache_folder.ENV in said[0]
