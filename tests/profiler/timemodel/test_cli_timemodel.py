"""`attnprof calibrate` and `attnprof predict --sort time` on the command line."""

import json

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.timemodel import calibrate

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_calibrate_prints_the_figures_and_json_reads_back():
    text = run("calibrate", "--threads", "1")
    assert text.exit_code == 0 and "GFLOP/s GEMM" in text.stdout and "measured in" in text.stdout
    again = run("calibrate", "--threads", "1", "--json")
    data = json.loads(again.stdout)
    assert again.exit_code == 0 and data["cached"] and data["threads"] == 1 and data["gemm_flops_per_s"]["float32"] > 0


@pytest.mark.parametrize("bad", [{"gemm_flops_per_s": {"float32": 0.0}}, {"bandwidth_bytes_per_s": 5e13}])
def test_an_implausible_calibration_is_one_error_line_and_exit_2(monkeypatch, bad):
    from tests.conftest import STUB_CALIBRATION

    def measure(threads=None, budget_s=15.0):
        host, cpu, version, threads = calibrate.describe_machine(threads)
        return calibrate.Calibration(host=host, cpu=cpu, torch_version=version, threads=threads,
                                     **{**STUB_CALIBRATION, **bad})

    monkeypatch.setattr(calibrate, "measure", measure)
    result = run("calibrate", "--no-cache")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: calibration of this machine is implausible")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_calibrate_refuses_a_thread_count_below_one():
    result = run("calibrate", "--threads", "0")
    assert result.exit_code == 2 and result.stderr.startswith("error: --threads")


def _ranked(stdout: str) -> list:
    rows = [line.split() for line in stdout.splitlines() if line[:1].isdigit()]
    return [(r[1], r[2]) for r in rows]


def test_predict_sort_time_ranks_the_points_fastest_first_on_the_cpu_model():
    from attnprof import api

    result = api.predict(variants="sdpa,full", modes="plain,checkpoint", seq_lens=[512], d_model=64, heads=2,
                         layers=1, sort="time")
    steps = [r["predicted_time_fwd_ms"] + r["predicted_time_bwd_ms"] for r in result.records]
    assert all(s > 0 for s in steps)
    expected = [(r["variant"], r["mode"]) for _, r in sorted(zip(steps, result.records), key=lambda x: x[0])]
    table = result.table()
    assert "this machine's CPU" in table and _ranked(table) == expected


def test_predict_sort_time_on_a_gpu_ranks_by_the_gpus_time_and_says_so():
    result = run("predict", "--variant", "sdpa,full", "--mode", "plain", "--seq-len", "2048", "--d-model", "64",
                 "--heads", "2", "--layers", "1", "--dtype", "bf16", "--gpu", "a100-80gb", "--sort", "time")
    assert result.exit_code == 0, result.output
    assert "on a100-80gb" in result.stdout and _ranked(result.stdout)[0] == ("sdpa", "plain")


def test_predict_without_a_calibration_measures_nothing_and_says_how(monkeypatch):
    """A plain predict stays at planning speed: this CPU's times come from a cached
    calibration only; without one it says how to make one (and the GPU's time is there)."""
    def no_measuring(*args, **kwargs):
        raise AssertionError("predict calibrated")

    monkeypatch.setattr(calibrate, "measure", no_measuring)
    result = run("predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "512", "--d-model", "64",
                 "--heads", "2", "--layers", "1", "--gpu", "l4", "--json")
    (record,) = json.loads(result.stdout)
    assert result.exit_code == 0 and record["predicted_time_fwd_ms"] is None and record["gpu_time_fwd_ms"] > 0
    table = run("predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "512", "--d-model", "64",
                "--heads", "2", "--layers", "1")
    assert "attnprof calibrate" in table.stderr


def test_predict_prints_the_time_and_json_has_the_fields():
    assert run("calibrate").exit_code == 0  # cached: predict uses it from now on
    result = run("predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "512", "--d-model", "64",
                 "--heads", "2", "--layers", "1", "--gpu", "l4", "--json")
    (record,) = json.loads(result.stdout)
    assert result.exit_code == 0 and record["gpu"] == "l4"
    assert record["gpu_time_fwd_ms"] > 0 and record["gpu_time_bwd_ms"] > 0 and record["gpu_tokens_per_s"] > 0
    assert record["predicted_time_fwd_ms"] > 0
    table = run("predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "512", "--d-model", "64",
                "--heads", "2", "--layers", "1")
    assert "step-time MODEL on this machine's CPU" in table.stdout


@pytest.mark.parametrize("args, says", [(["--sort", "memory"], "--sort"),
                                        (["--sort", "time", "--budget", "1GiB"], "leave out --budget")])
def test_predict_sort_mistakes_are_one_line(args, says, capsys):
    from attnprof.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["predict", "--variant", "sdpa", "--seq-len", "256", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1
