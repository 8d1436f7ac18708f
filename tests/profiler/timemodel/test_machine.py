"""A cached calibration is data: an entry whose figures are of the wrong type or out of
range is ignored with one warning line and measured again (then rewritten), in
`predict`, `predict --sort time` and `calibrate`; a plain `predict` (which never
measures) predicts no time from it. `calibrate --threads` is bounded by the CPUs."""

import json
import math

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.profiler.forks import usable_cores
from attnprof.profiler.timemodel import calibrate, machine

runner = CliRunner()
PREDICT = ["predict", "--variant", "sdpa", "--mode", "plain", "--seq-len", "256", "--d-model", "32", "--heads", "2",
           "--layers", "1"]
# What a corrupt or hand-edited entry may hold where a figure goes (JSON reads NaN too).
BAD = [
    ("gemm_flops_per_s", [1e11]),
    ("gemm_flops_per_s", "1e11"),
    ("gemm_flops_per_s", None),
    ("gemm_flops_per_s", {"float32": -1.0}),
    ("gemm_flops_per_s", {"float32": math.nan}),
    ("gemm_flops_per_s", {"float32": "fast"}),
    ("attention_fwd_flops_per_s", "x"),
    ("bandwidth_bytes_per_s", None),
    ("overhead_fwd_s", [2e-6]),
    ("gemm_k_flops_per_s", {"float32": [1]}),
    ("class_bytes_per_s", None),
    ("threads", "1"),
    ("notes", "n"),
    ("host", 5),
    # issue 40: absurd but positive (they predicted infinite times, printed as Infinity in --json)
    ("gemm_flops_per_s", {"float32": 5e-324}),
    ("bandwidth_bytes_per_s", 1e-300),
    ("attention_bwd_flops_per_s", {"float32": 1e30}),
    ("overhead_fwd_s", 1e-300),
]


def cached_entry(threads: int = 1):
    """A good entry for this machine at ``threads`` (the conftest's stub measurement)."""
    cal, cached = machine.calibration(threads)
    return cal, machine.path_of(cal.key())


def spoil(path, field, value):
    data = json.loads(path.read_text())
    data["calibration"][field] = value
    path.write_text(json.dumps(data))


def warnings_in(text: str) -> list:
    return [line for line in text.splitlines() if "cached calibration" in line]


@pytest.mark.parametrize("field,value", BAD)
def test_a_bad_entry_is_ignored_with_one_line_and_measured_again(field, value):
    cal, path = cached_entry()
    spoil(path, field, value)
    warned = []
    spoiled = path.read_bytes()
    assert machine.load(cal.key(), warn=warned.append) is None
    assert len(warned) == 1 and str(path) in warned[0] and "\n" not in warned[0], warned
    [aside] = [p for p in path.parent.iterdir() if ".unreadable-" in p.name]
    assert f"kept as {aside.name}" in warned[0] and aside.read_bytes() == spoiled  # never deleted
    again, cached = machine.calibration(1, warn=warned.append)
    assert not cached and len(warned) == 1  # the bad entry is out of the way: measured, no second line
    assert machine.load(cal.key()) == again and aside.read_bytes() == spoiled  # written beside it


@pytest.mark.parametrize("text", ["[]", '{"key": 1, "calibration": [1]}', "nul", "[" * 100_000])
def test_an_entry_that_is_not_a_record_is_ignored_with_one_line(text):
    cal, path = cached_entry()
    path.write_text(text)
    warned = []
    assert machine.load(cal.key(), warn=warned.append) is None and len(warned) == 1


@pytest.mark.parametrize("field,value", [BAD[0], BAD[2], BAD[4]])
def test_the_commands_warn_once_and_never_a_traceback(field, value):
    cal, path = cached_entry(threads=None)  # predict and calibrate use torch's thread count
    spoil(path, field, value)
    plain = runner.invoke(app, [*PREDICT, "--json"])
    assert plain.exit_code == 0 and plain.exception is None, plain.stderr
    assert len(warnings_in(plain.stderr)) == 1 and "Traceback" not in plain.stderr
    record = json.loads(plain.stdout)[0]
    assert record["predicted_time_fwd_ms"] is None and record["predicted_time_bwd_ms"] is None  # none invented
    assert machine.load(cal.key()) is None  # a plain predict does not measure, so nothing was rewritten

    ranked = runner.invoke(app, [*PREDICT, "--sort", "time"])
    assert ranked.exit_code == 0 and ranked.exception is None, ranked.stderr
    assert len(warnings_in(ranked.stderr)) == 0 and "Traceback" not in ranked.stderr  # the entry was moved aside
    assert machine.load(cal.key()) is not None  # measured again and written

    spoil(path, field, value)
    calibrated = runner.invoke(app, ["calibrate"])
    assert calibrated.exit_code == 0 and calibrated.exception is None, calibrated.stderr
    assert len(warnings_in(calibrated.stderr)) == 1 and "measured in" in calibrated.stdout
    assert machine.load(cal.key()) is not None


def test_threads_beyond_the_cpus_are_one_line_and_exit_2():
    cores = usable_cores()
    for threads in (cores + 1, 100_000):
        result = runner.invoke(app, ["calibrate", "--threads", str(threads)])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: --threads") and str(cores) in result.stderr
    assert runner.invoke(app, ["calibrate", "--threads", str(cores)]).exit_code == 0


def test_a_record_of_wrong_types_is_a_list_of_reasons_not_a_type_error():
    cal, _ = cached_entry()
    for field, value in BAD:
        broken = calibrate.Calibration(**{**cal.to_dict(), field: value})
        found = calibrate.problems(broken)
        assert found and all(isinstance(line, str) and "\n" not in line for line in found), (field, found)


def refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_absurd_positive_rates_are_ignored_and_no_infinite_time_is_printed():
    """Issue 40: rates of 5e-324 FLOP/s and 1e-300 B/s passed as plausible, and predict --json
    printed Infinity (not JSON), the table 'inf s'."""
    cal, path = cached_entry(threads=None)
    spoil(path, "gemm_flops_per_s", {dtype: 5e-324 for dtype in cal.gemm_flops_per_s})
    data = json.loads(path.read_text())
    data["calibration"]["bandwidth_bytes_per_s"] = 1e-300
    path.write_text(json.dumps(data))
    plain = runner.invoke(app, [*PREDICT, "--json"])
    assert plain.exit_code == 0, plain.stderr
    record = json.loads(plain.stdout, parse_constant=refuse)[0]
    assert record["predicted_time_fwd_ms"] is None and record["predicted_time_bwd_ms"] is None
    assert len(warnings_in(plain.stderr)) == 1 and "5e-324" in warnings_in(plain.stderr)[0]
    table = runner.invoke(app, PREDICT)
    assert table.exit_code == 0 and "inf" not in table.stdout, table.stdout
    calibrated = runner.invoke(app, ["calibrate", "--json"])  # measured again (the bad entry was moved aside)
    assert calibrated.exit_code == 0 and len(warnings_in(calibrated.stderr)) == 0
    assert json.loads(calibrated.stdout, parse_constant=refuse)["cached"] is False
    assert machine.load(cal.key()) is not None


def test_text_from_the_cache_reaches_the_terminal_spelled_out():
    """Issue 40, item 2: a note (or a CPU name) read from the calibration cache printed its
    terminal escape sequences raw."""
    cal, path = cached_entry(threads=None)
    data = json.loads(path.read_text())
    data["calibration"]["notes"] = ["\x1b[31mred\x1b[0m\nsecond line"]
    path.write_text(json.dumps(data))
    result = runner.invoke(app, ["calibrate"])
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\\x1b[31mred" in result.stdout
    assert "note: \\x1b[31mred\\x1b[0m\\nsecond line" in result.stdout.splitlines()[-1]  # one line, spelled out
