"""``attnprof report`` on a run folder someone handed over: it writes nothing through a
planted link, survives hostile render caches, says which records it skipped, and refuses
an unwritable output before any work; a read-only HOME adds nothing to its output."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.predict.cache import versions_tag
from attnprof.reports.capacity import CACHE_FILE, GPU_CACHE_FILE, point_maker  # noqa: I001
from attnprof.reports.data import load

from conftest import Page, ci_records, write_run

runner = CliRunner()
CHARTS = ("memory", "time", "savings", "time-accuracy", "capacity", "timeline")  # report-<name>.png
DEEP = "[" * 200_000 + "]" * 200_000


def records():
    """Records that draw every chart (the time-accuracy one needs predicted times)."""
    for r in ci_records(variants=("sdpa", "full")):
        if r.status == "ok":
            r.predicted_time_fwd_ms, r.predicted_time_bwd_ms = 1.1 * r.time_fwd_ms, 1.2 * r.time_bwd_ms
        yield r


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run", records())


def report(*args):
    return runner.invoke(app, ["report", *map(str, args)])


# --- planted links -------------------------------------------------------------------------
# What the target holds: a cache the render would read through the link and write back.
TARGETS = {CACHE_FILE: b'{"x": 1000}', GPU_CACHE_FILE: b'{"l4:0": {"k": {"gpu_total_bytes": 5, "gpu_fits": true}}}'}
LINKED = ["report.html", "report.html.tmp", *(f"report-{name}.png" for name in CHARTS), *TARGETS]


@pytest.mark.parametrize("name", LINKED)
def test_report_refuses_each_planted_link_and_its_target_is_untouched(run, tmp_path, name):
    target = tmp_path / "outside" / ".bashrc"
    target.parent.mkdir()
    target.write_bytes(TARGETS.get(name, b"export PATH=/usr/bin\n"))
    before = target.read_bytes()
    (run / name).symlink_to(target)
    result = report(run, "--seconds", "0", *(["--gpu", "l4"] if name == GPU_CACHE_FILE else []))
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "symbolic link" in result.stderr and name in result.stderr
    assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == [".bashrc"]


# --- hostile render caches -----------------------------------------------------------------
def cache_keys(run) -> list[str]:
    """The keys the render looks up for the run's first series (every searched length)."""
    frame = load(run).frame
    rows = next(iter(frame.groupby(["series", "panel"], sort=False)))[1]
    make_point = point_maker(rows)
    return [make_point(1 << e).key_text() for e in range(4, 21)]


@pytest.mark.parametrize("value", [-1, 0, math.nan, math.inf, -math.inf, 1.5, 1 << 63, "12 MiB", [1], None, True,
                                   {"a": 1}],
                         ids=["-1", "0", "nan", "inf", "-inf", "fraction", "beyond-int64", "str", "list", "null", "bool",
                              "object"])
def test_a_bad_prediction_cache_entry_is_ignored_kept_aside_and_said_once(run, value):
    (run / CACHE_FILE).write_text(json.dumps({versions_tag(): {k: value for k in cache_keys(run)}}))
    bad = (run / CACHE_FILE).read_bytes()
    result = report(run, "--seconds", "0")
    assert result.exit_code == 0, (result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and CACHE_FILE in lines[0], result.stderr
    [aside] = [p for p in run.iterdir() if p.name.startswith(CACHE_FILE + ".unreadable-")]
    assert "17 of 17 entries invalid" in lines[0] and f"kept as {aside.name}" in lines[0]
    assert aside.read_bytes() == bad  # never deleted
    assert json.loads((run / CACHE_FILE).read_text()) == {}  # written anew without them


@pytest.mark.parametrize("name, text, fragment", [
    (CACHE_FILE, DEEP, "nested too deeply"), (CACHE_FILE, "{torn", "not valid JSON"),
    (CACHE_FILE, "[1, 2]", "not a JSON object"), (GPU_CACHE_FILE, '{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    (GPU_CACHE_FILE, '{"fp": {"k": {"gpu_total_bytes": -1, "gpu_fits": true}}, "x": 5}', "2 of 2 entries invalid")])
def test_an_unreadable_render_cache_is_ignored_rewritten_and_said_once(run, name, text, fragment):
    (run / name).write_text(text)
    result = report(run, "--seconds", "0", *(["--gpu", "l4"] if name == GPU_CACHE_FILE else []))
    assert result.exit_code == 0, (result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and name in lines[0] and fragment in lines[0], lines
    assert json.loads((run / name).read_text()) == {}


# --- skipped records: said on stderr and on the page ---------------------------------------
def test_report_renders_the_valid_records_and_says_which_it_skipped(tmp_path):
    run = write_run(tmp_path / "run <b>x</b>", records())
    valid = (run / "results.jsonl").read_text().splitlines()
    first = json.loads(valid[0])
    bad = [json.dumps({**first, "seq_len": None}), json.dumps({**first, "variant": ["sdpa"]}), DEEP]
    (run / "results.jsonl").write_text("\n".join(valid[:2] + bad + valid[2:]) + "\n")
    result = report(run, "--seconds", "0")
    assert result.exit_code == 0, (result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: skipped 3 invalid record(s)"), result.stderr
    assert "results.jsonl line 3, 4, 5" in lines[0] and "seq_len is null" in lines[0]
    page = Page((run / "report.html").read_text(encoding="utf-8"))
    shown = " ".join(page.text)
    assert "skipped 3 invalid record(s)" in shown and "line 3, 4, 5" in shown and "run <b>x</b>" in shown
    assert "b" not in page.tags  # the folder's name is text on the page, not markup
    assert f"{len(valid)} points" in shown


# --- storage checks before any work --------------------------------------------------------
def test_an_unwritable_output_is_one_line_before_any_work(run, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for output, fragment in ((tmp_path / ("r" * 300 + ".html"), "longer than 255 bytes"),
                             (blocker / "report.html", "is a file, not a folder"),
                             ("/proc/attnprof-report.html", "cannot write the report /proc")):  # probed
        result = report(run, "--seconds", "0", "--output", output)
        assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
        assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
    assert not list(tmp_path.glob("*.png")) and not (run / "report.html").exists()


def test_a_read_only_home_adds_nothing_to_the_output(run, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = str(blocker / "home")  # nothing can be created under it, not even by root
    done = subprocess.run([sys.executable, "-m", "attnprof", "report", str(run), "--seconds", "0"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == f"report: {run / 'report.html'}\n"


@pytest.mark.parametrize("name", ["results.jsonl", "gpu-types.json"])
def test_report_never_reads_a_planted_link_or_fifo(run, tmp_path, name):
    """A results file linked to a secret would have its lines copied aside as 'invalid'
    and shown; a FIFO would hang the render. Both are refused in one line, exit 2."""
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    (run / name).unlink(missing_ok=True)
    if name == "gpu-types.json":  # read only where there is no results file (a --gpu-types sweep's root)
        (run / "results.jsonl").unlink()
    (run / name).symlink_to(secret)
    result = report(run, "--seconds", "0")
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert result.stderr.count("\n") == 1 and name in result.stderr, result.stderr
    assert "PRIVATE" not in result.stderr + result.stdout
    assert not any("quarantine" in p.name for p in run.iterdir())
    (run / name).unlink()
    os.mkfifo(run / name)
    result = report(run, "--seconds", "0")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, (result.stderr, result.exception)
