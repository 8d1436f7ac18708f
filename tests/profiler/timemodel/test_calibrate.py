"""Calibration: plausibility, the cache (corrupt entries are ignored and rewritten), and one
real measurement. ``stub_calibration`` (tests/conftest.py) replaces the measurement
everywhere else; here it is replaced again, or the real one is called."""

import json

import pytest

from attnprof.profiler.timemodel import calibrate, machine
from attnprof.profiler.timemodel.calibrate import Calibration, CalibrationError
from attnprof.profiler.timemodel.rates import cpu_rates

GOOD = dict(gemm_flops_per_s={"float32": 1e11}, attention_fwd_flops_per_s={"float32": 5e10},
            attention_bwd_flops_per_s={"float32": 3e10}, bandwidth_bytes_per_s=2e10, overhead_fwd_s=2e-6,
            overhead_bwd_s=4e-6)


def fake(monkeypatch, **changes):
    calls = []

    def measure(threads=None, budget_s=calibrate.BUDGET_S):
        calls.append(threads)
        host, cpu, version, threads = calibrate.describe_machine(threads)
        return Calibration(host=host, cpu=cpu, torch_version=version, threads=threads, **{**GOOD, **changes})

    monkeypatch.setattr(calibrate, "measure", measure)
    return calls


@pytest.mark.parametrize("changes, says", [
    ({"gemm_flops_per_s": {"float32": 0.0}}, "float32 GEMM rate"),
    ({"gemm_flops_per_s": {"float32": -5.0}}, "float32 GEMM rate"),
    ({"gemm_flops_per_s": {"bfloat16": 1e11}}, "no float32 GEMM rate"),
    ({"bandwidth_bytes_per_s": 11e12}, "memory bandwidth"),
    ({"overhead_fwd_s": 0.0}, "forward per-op overhead"),
    ({"overhead_bwd_s": 2.0}, "backward per-op overhead"),
    ({"attention_fwd_flops_per_s": {"float32": 1e13}}, "GEMM measurement was disturbed"),
    ({"bandwidth_bytes_per_s": float("nan")}, "memory bandwidth"),
])
def test_an_implausible_calibration_is_one_line_and_nothing_is_cached(monkeypatch, changes, says):
    fake(monkeypatch, **changes)
    with pytest.raises(CalibrationError) as exc:
        machine.calibration()
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert not list((machine.path_of({"x": 1}).parent).glob("*.json"))


def test_a_failed_calibration_leaves_the_sweep_without_rates_after_one_warning(monkeypatch):
    fake(monkeypatch, gemm_flops_per_s={"float32": 0.0})
    warnings = []
    assert machine.machine_rates(warn=warnings.append) is None
    assert len(warnings) == 1 and warnings[0].startswith("warning: calibration of this machine is implausible")


def test_the_calibration_is_cached_per_thread_count(monkeypatch):
    calls = fake(monkeypatch)
    first, cached = machine.calibration(threads=1)
    assert not cached and machine.path_of(first.key()).is_file()
    again, cached = machine.calibration(threads=1)
    assert cached and again == first and len(calls) == 1
    other, cached = machine.calibration(threads=2)
    assert not cached and other.threads == 2 and len(calls) == 2
    _, cached = machine.calibration(threads=1, use_cache=False)
    assert not cached and len(calls) == 3


@pytest.mark.parametrize("corrupt", [
    lambda text: "{not json",
    lambda text: "",
    lambda text: json.dumps({"key": {"host": "elsewhere"}, "calibration": json.loads(text)["calibration"]}),
    lambda text: text.replace('"bandwidth_bytes_per_s": 20000000000.0', '"bandwidth_bytes_per_s": -1'),
    lambda text: json.dumps({"key": json.loads(text)["key"], "calibration": {"host": "x"}}),
])
def test_a_corrupt_or_foreign_entry_is_ignored_and_rewritten(monkeypatch, corrupt):
    calls = fake(monkeypatch)
    cal, _ = machine.calibration(threads=1)
    path = machine.path_of(cal.key())
    text = path.read_text()
    path.write_text(corrupt(text))
    assert machine.load(cal.key()) is None
    again, cached = machine.calibration(threads=1)
    assert not cached and len(calls) == 2 and again.bandwidth_bytes_per_s == 2e10
    assert machine.load(cal.key()) == again  # rewritten


def test_cpu_rates_take_the_measured_figures():
    host, cpu, version, threads = calibrate.describe_machine(1)
    rates = cpu_rates(Calibration(host=host, cpu=cpu, torch_version=version, threads=1, **GOOD))
    assert rates.kind == "cpu" and rates.peak("float32") == 1e11 and rates.gemm_efficiency == 1.0
    assert rates.attention("float32", backward=False) == 0.5 and rates.attention("float32", backward=True) == 0.3
    assert rates.overhead_s(backward=True) == 4e-6 and rates.bandwidth("copy") == 2e10


@pytest.mark.slow
def test_a_real_measurement_is_plausible(stub_calibration):
    cal = calibrate.check(stub_calibration(threads=1))  # the real one, kept by the fixture
    assert cal.threads == 1 and cal.gemm_flops_per_s["float32"] > 0 and cal.overhead_fwd_s > 0
    assert set(cal.gemm_flops_per_s) <= set(calibrate.DTYPES) and cal.wall_s > 0


def test_the_limits_are_derived_from_the_cpu_figures_and_the_gpu_table():
    """Issue 40: the comment beside LIMITS says where they come from; this reads both sources
    again (the built-in GPU table, and the CPU figures docs/time-model.md records), so a
    figure of 5e-324 FLOP/s or 1e-300 B/s can no longer pass as plausible."""
    import tomllib
    from pathlib import Path

    from attnprof.profiler.hardware.gpus import BUILTIN_FILE

    gpus = tomllib.loads(BUILTIN_FILE.read_text())["gpus"].values()
    assert calibrate.GPU_FASTEST_FLOPS_PER_S == max(v for g in gpus for v in g["tflops"].values()) * 1e12
    assert calibrate.GPU_FASTEST_BYTES_PER_S == max(g["bandwidth_bytes_per_s"] for g in gpus)
    doc = (Path(calibrate.__file__).parents[2] / "docs" / "time-model.md").read_text()
    assert "(another run: 99 /" in doc and "`sort` 0.6" in doc and "/ 11.2 µs" in doc  # the slowest CPU figures
    assert calibrate.LIMITS["flops_per_s"] == (99e9 / 1000, calibrate.GPU_FASTEST_FLOPS_PER_S)
    assert calibrate.LIMITS["bandwidth_bytes_per_s"] == (0.6e9 / 1000, 2 * calibrate.GPU_FASTEST_BYTES_PER_S)
    assert calibrate.LIMITS["overhead_s"] == (11.2e-6 / 1000, 1e-2)
    for field, value in (("gemm_flops_per_s", {"float32": 5e-324}), ("bandwidth_bytes_per_s", 1e-300),
                         ("overhead_bwd_s", 1e-300), ("attention_fwd_flops_per_s", {"float32": 5e-324})):
        found = calibrate.problems(Calibration(host="h", cpu="c", torch_version="t", threads=1, **{**GOOD, field: value}))
        assert found and "is not in [" in found[0], (field, found)
    assert not calibrate.problems(Calibration(host="h", cpu="c", torch_version="t", threads=1, **GOOD))
