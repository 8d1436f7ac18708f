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
    (["predict", *SMALL, "--seq-len", "256", "--gpu-file", "/nonexistent.toml"], "without --gpu it would be ignored"),
    (["report", "/nonexistent/run", "--gpu-file", "/nonexistent.toml"], "without --gpu it would be ignored"),
    (["sweep", *SMALL, "--seq-len", "64", "--gpu-file", "/nonexistent.toml"], "without --gpu it would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--budget", "1GiB"], "--seq-len would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--max-len", "1024"], "--min-len/--max-len would be ignored"),
    (["sweep", *SMALL, "--seq-len", "64", "--min-len", "64"], "--min-len/--max-len would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--batch", "2", "--tokens-per-batch", "4096"], "--batch would be ignored"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--layers", "2"], "--layers"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--mode", "plain"], "--mode"),
    (["predict", *SMALL, "--seq-len", "256", "--scope", "attention", "--ff-chunks", "2"], "--ff-chunks"),
    (["predict", *SMALL, "--seq-len", "256", "--sort", "time", "--json"], "--json"),
    (["sweep", *SMALL, "--seq-len", "64", "--ray-cpus-per-point", "2"], "--ray-cpus-per-point is for --executor ray"),
    # issue 40: refused before the banner (stderr held the banner, then the error)
    (["sweep", *SMALL, "--seq-len", "64", "--device", "cpu", "--gpu-types", "junk"], "--gpu-types needs --executor ray"),
    (["sweep", *SMALL, "--seq-len", "64", "--device", "cpu", "--gpu-types", "all"], "--gpu-types needs --executor ray"),
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


@pytest.mark.parametrize("args, said, unsaid", [
    (["--max-len", "1024"], "the default min_len 65536 is above --max-len 1024: give --min-len too", "--min-len 65536"),
    (["--min-len", "131072"], "--min-len 131072 is above the default max_len 65536: give --max-len too",
     "--max-len 65536"),
    (["--min-len", "2048", "--max-len", "1024"], "--min-len 2048 is above --max-len 1024", "default"),
])
def test_a_refusal_names_only_the_flags_given(args, said, unsaid):
    """Issue 40: a length the user never gave is named as the default it is."""
    result = runner.invoke(app, ["predict", *SMALL, "--layers", "1", *args])
    assert result.exit_code == 2 and said in result.stderr and unsaid not in result.stderr, result.stderr


def test_a_budget_with_only_max_len_searches_from_its_own_default():
    """Issue 40: --budget --max-len without --min-len was refused citing --min-len 65536 (predict's
    length without a budget); a budget search starts at 256."""
    result = runner.invoke(app, ["predict", *SMALL, "--layers", "1", "--mode", "plain", "--budget", "1GiB",
                                 "--max-len", "512"])
    assert result.exit_code == 0, result.stderr
    assert "512" in result.stdout and "limit of 512 tokens" in result.stdout
