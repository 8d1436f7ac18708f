"""A snapshot from elsewhere is read as plain data or refused, never run."""

import os
import pickle

import pytest

from attnprof.profiler.timeline.plain_pickle import SnapshotRefused, load_plain


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_plain_snapshot_loads(tmp_path):
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 2, "frames": []}]],
            "allocator_settings": {"x": (1, 2.0, None, True)}}
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    assert load_plain(path) == snap


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_planted_pickle_is_refused_in_one_line_without_running(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [_Planted(marker)]}, protocol=protocol))
    with pytest.raises(SnapshotRefused) as err:
        load_plain(path)
    assert "\n" not in str(err.value) and "system" in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("data, why", [(b"not a pickle", "not a plain-data"), (pickle.dumps([1, 2]), "not a memory"),
                                       (pickle.dumps({"segments": 3}), "not a memory")])
def test_other_files_are_refused(tmp_path, data, why):
    path = tmp_path / "x"
    path.write_bytes(data)
    with pytest.raises(SnapshotRefused, match=why):
        load_plain(path)


def test_too_large_absent_and_linked_files_are_refused(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [list(range(1000))]}))
    with pytest.raises(SnapshotRefused, match="larger than"):
        load_plain(path, limit=100)
    with pytest.raises(SnapshotRefused, match="no such file"):
        load_plain(tmp_path / "absent")
    os.symlink(path, tmp_path / "link")
    with pytest.raises(Exception) as err:
        load_plain(tmp_path / "link")
    assert "link" in str(err.value)
