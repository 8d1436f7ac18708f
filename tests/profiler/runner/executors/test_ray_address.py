"""`--ray-address` is checked before the banner and before any run folder exists: its
syntax by the rules of host names and ports (never a UnicodeError from idna), then that
something answers there; a sweep that fails to start leaves no empty, locked folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.executors.ray_address import DEFAULT_PORT, parse, probe

CLI = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa", "--mode", "plain", "--min-len", "64",
       "--max-len", "64", "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "1", "--warmup", "0",
       "--device", "cpu", "--no-report", "--executor", "ray"]


@pytest.mark.parametrize("address,expected", [
    ("auto", None), ("local", None), ("127.0.0.1:6380", ("127.0.0.1", 6380)), ("head-node", ("head-node", DEFAULT_PORT)),
    ("ray://head.example.org:10001", ("head.example.org", 10001)), ("[::1]:6379", ("::1", 6379)),
    ("ray://[fe80::1]:1/", ("fe80::1", 1)), (" my_head:65535 ", ("my_head", 65535)),
])
def test_the_forms_taken(address, expected):
    assert parse(address) == expected


@pytest.mark.parametrize("address,words", [
    ("host:notaport", "not a number"), ("localhost:99999", "not in 1-65535"), ("localhost:0", "not in 1-65535"),
    ("a" * 300 + ":1", "300 characters"), ("a" * 64 + ".org:1", "label of 64"), (("ab." * 90) + "org:1", "at most 253"),
    ("\u00e9" * 70 + ":5", "not valid"), ("bad host:1", "label"), ("-x:1", "label"), (":6379", "no host"),
    ("", "empty"), ("ray://", "empty"), ("http://h:1", "unknown scheme"), ("::1:6379", "in brackets"),
    ("[zz]:1", "not an IPv6"), ("h:\u0661", "not a number"), ("h:1\x1b[2J", "not a number"),
])
def test_anything_else_is_one_line(address, words):
    with pytest.raises(SweepError, match=words) as info:
        parse(address)
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_an_address_where_nothing_listens_is_refused_by_the_probe():
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SweepError, match="cannot reach the Ray cluster"):
        probe(f"127.0.0.1:{port}")
    probe("auto")  # nothing to check: Ray finds or starts the cluster


@pytest.mark.parametrize("address", ["host:notaport", "localhost:99999", "h" * 300 + ":6379", "127.0.0.1:1"])
def test_the_sweep_refuses_before_the_banner_and_creates_no_folder(tmp_path, address):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(CLI + ["--out", str(out), "--ray-address", address], capture_output=True, text=True,
                          timeout=120, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and "attnprof sweep:" not in done.stderr  # no banner
    assert not out.exists()


def test_a_sweep_that_cannot_connect_removes_the_folder_it_created(tmp_path):
    """Past the early checks (here: run_sweep called directly, as a library user may), a
    failed connection still leaves no empty, locked folder; a folder that was there stays."""
    pytest.importorskip("ray")
    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
    from attnprof.scenarios.scenario import Scenario

    settings = SweepSettings(device="cpu", executor="ray", ray_address="127.0.0.1:1", warmup=0, repeats=1)
    scenario = Scenario(variants=("sdpa",), modes=("plain",), min_len=64, max_len=64, d_model=32, heads=2, layers=1)
    new = tmp_path / "new" / "run"
    with pytest.raises(SweepError):
        run_sweep(scenario, new, settings, show_progress=False)
    assert not new.exists() and new.parent.is_dir()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(SweepError):
        run_sweep(scenario, kept, settings, show_progress=False)
    assert kept.is_dir() and sorted(p.name for p in kept.iterdir()) == [".sweep.lock"]
