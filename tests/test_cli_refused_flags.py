"""Flags that would change nothing are refused: an empty --gpu, --tokens-per-batch 0, and
every flag the chosen mode ignores (--seq-len with --budget, ...) is one line and exit 2,
before any work, rather than figures for a setting that was never applied."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from attnprof.cli import app

runner = CliRunner()
SMALL = ["--variant", "sdpa", "--d-model", "32", "--heads", "2"]


@pytest.mark.parametrize("args, words", [
    (["predict", *SMALL, "--seq-len", "256", "--gpu", ""], "empty GPU name"),
    (["predict", *SMALL, "--seq-len", "256", "--gpu", ",,"], "empty GPU name"),
    (["predict", *SMALL, "--seq-len", "256", "--gpu", "h100-sxm,"], "empty GPU name"),
    (["report", "/nonexistent/run", "--gpu", " "], "empty GPU name"),
    (["sweep", *SMALL, "--seq-len", "64", "--gpu", ","], "empty GPU name"),
    (["predict", *SMALL, "--seq-len", "256", "--tokens-per-batch", "0"], "--tokens-per-batch must be a positive"),
    (["predict", *SMALL, "--seq-len", "256", "--budget", "1GiB"], "--seq-len would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--max-len", "1024"], "--min-len/--max-len would be ignored"),
    (["sweep", *SMALL, "--seq-len", "64", "--min-len", "64"], "--min-len/--max-len would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--batch", "2", "--tokens-per-batch", "4096"], "--batch would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--layers", "2"], "--layers"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--mode", "plain"], "--mode"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--ff-chunks", "2"], "--ff-chunks"),
    (["predict", *SMALL, "--seq-len", "256", "--sort", "time", "--json"], "--json"),
    (["sweep", *SMALL, "--seq-len", "64", "--ray-cpus-per-point", "2"], "--ray-cpus-per-point is for --executor ray"),
])
def test_a_flag_that_would_change_nothing_is_one_line_and_exit_2(tmp_path, args, words):
    result = runner.invoke(app, args + (["--out", str(tmp_path / "run")] if args[0] == "sweep" else []))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert result.stdout == "" and not (tmp_path / "run").exists()


def test_the_same_flags_alone_still_work():
    for args in (["--seq-len", "256", "--batch", "2"], ["--tokens-per-batch", "4096", "--seq-len", "256"],
                 ["--scope", "attention", "--seq-len", "256"], ["--min-len", "256", "--max-len", "512",
                                                                 "--budget", "1GiB"]):
        result = runner.invoke(app, ["predict", *SMALL, "--layers", "1", *args] if "attention" not in args
                               else ["predict", *SMALL, *args])
        assert result.exit_code == 0, (args, result.stderr)
