"""The command line: listings, predict output, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from attnprof.cli import app

runner = CliRunner()


def attnprof(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=timeout)


def test_help_and_variants_list_the_six_variants_with_papers():
    assert runner.invoke(app, ["--help"]).exit_code == 0
    out = runner.invoke(app, ["variants"]).output
    for name in ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed"]:
        assert f"\n{name} " in "\n" + out
    assert out.count("paper:") >= 6 and "arXiv 2001.04451" in out


def test_scenarios_lists_the_presets():
    out = runner.invoke(app, ["scenarios"]).output
    assert "default" in out and "ci" in out


def test_predict_json_has_the_documented_fields():
    result = runner.invoke(app, ["predict", "--variant", "sdpa,lsh[n_hashes=4]", "--mode", "plain", "--seq-len", "1024",
                                 "--seq-len", "2048", "--d-model", "64", "--heads", "4", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 4
    for row in rows:
        for field in ["variant", "mode", "scope", "seq_len", "batch", "heads", "d_model", "layers", "dtype",
                      "predicted_peak_bytes", "flops"]:
            assert field in row
    assert {r["variant"] for r in rows} == {"sdpa", "lsh[n_hashes=4]"}


def test_predict_full_attention_at_64k_reports_the_16_gib_scores():
    result = runner.invoke(app, ["predict", "--variant", "full", "--scope", "attention", "--batch", "1", "--heads", "1",
                                 "--head-dim", "64", "--dtype", "float32", "--seq-len", "65536", "--forward-only"])
    assert result.exit_code == 0, result.output
    assert "32.05 GiB" in result.output and "16.00 GiB" in result.output and "[1, 1, 65536, 65536]" in result.output


def test_budget_reports_the_longest_fitting_power_of_two():
    result = runner.invoke(app, ["predict", "--variant", "full,sdpa", "--mode", "plain", "--d-model", "64", "--heads", "4",
                                 "--layers", "1", "--budget", "64MiB", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(result.output)}
    assert rows["full"]["longest_fitting_seq_len"] < rows["sdpa"]["longest_fitting_seq_len"]
    assert rows["full"]["predicted_peak_bytes"] <= 64 << 20


@pytest.mark.parametrize("args, message", [
    (["predict", "--seq-len", "0"], "positive"),
    (["predict", "--seq-len", "-5"], "positive"),
    (["predict", "--d-model", "100", "--heads", "3"], "not divisible"),
    (["predict", "--variant", "nope"], "unknown variant"),
    (["predict", "--mode", "sideways"], "unknown mode"),
    (["predict", "--dtype", "int7"], "unknown dtype"),
    (["predict", "--budget", "lots"], "cannot parse size"),
    (["predict", "--seq-len", "abc"], "seq-len"),
    (["predict", "--variant", "lsh[n_hashes=x]"], "not an integer; valid options"),
    (["predict", "--variant", "lsh[colour=red]"], "valid options"),
    (["predict", "--variant", "lsh[bucket_size=48]", "--seq-len", "1024"], "bucket_size"),
    (["sweep", "--scenario", "no-such-scenario"], "unknown scenario"),
    (["sweep", "--device", "tpu"], "unknown device"),
    (["report", "/nonexistent/run"], "run"),
    (["gate", "--baseline", "/nonexistent.json", "/nonexistent/run"], "error"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = attnprof(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_tokens_per_batch_sets_batch_from_the_length():
    result = runner.invoke(app, ["predict", "--variant", "sdpa", "--mode", "plain", "--min-len", "1024",
                                 "--max-len", "4096", "--d-model", "64", "--heads", "4", "--tokens-per-batch", "8192",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert {r["seq_len"]: r["batch"] for r in json.loads(result.output)} == {1024: 8, 2048: 4, 4096: 2}
