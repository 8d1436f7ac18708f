"""Per-class CPU throughput: the calibrated class rates become the CPU's bandwidth
efficiencies, the model costs each class at its own rate, and implausible new figures are
one line (measurements monkeypatched)."""

import pytest

from attnprof.profiler.timemodel import calibrate, calibrate_ops, machine
from attnprof.profiler.timemodel.calibrate import Calibration, CalibrationError
from attnprof.profiler.timemodel.rates import cpu_rates
from attnprof.profiler.timemodel.roofline import predict_time

BASE = dict(gemm_flops_per_s={"float32": 1e11}, attention_fwd_flops_per_s={"float32": 5e10},
            attention_bwd_flops_per_s={"float32": 3e10}, bandwidth_bytes_per_s=2e10, overhead_fwd_s=1e-6,
            overhead_bwd_s=2e-6, gemm_square_k={"float32": 1024},
            gemm_k_flops_per_s={"float32": {"16": 1e10, "256": 8e10}},
            class_bytes_per_s={"elementwise": 5e9, "reduction": 4e9, "gather_scatter_sort": 2e9})


def calibration(**changes):
    host, cpu, version, threads = calibrate.describe_machine(1)
    return Calibration(host=host, cpu=cpu, torch_version=version, threads=threads, **{**BASE, **changes})


def test_each_class_is_costed_at_its_calibrated_rate():
    rates = cpu_rates(calibration())
    assert rates.bandwidth("reduction") == pytest.approx(4e9) and rates.bandwidth("copy") == 2e10
    assert rates.bandwidth("gemm") == 2e10  # a GEMM's memory term streams like a copy
    nbytes = 10**9
    for op, rate in (("_softmax.default", 4e9), ("masked_fill.Scalar", 5e9), ("gather.default", 2e9),
                     ("clone.default", 2e10), ("some_new_op.default", 5e9)):  # unknown: elementwise
        t = predict_time([["fwd", op, 0, nbytes, 0, 1]], rates, "float32")
        assert t.time_fwd_ms == pytest.approx(nbytes / rate * 1e3 + 1e-3), op


def test_the_thin_gemm_table_reaches_the_rates():
    rates = cpu_rates(calibration())
    assert rates.gemm_flops_per_s("float32", 16) == 1e10 and rates.gemm_flops_per_s("float32", 1024) == 1e11


def test_a_calibration_without_the_new_figures_costs_every_class_at_the_copy_rate():
    rates = cpu_rates(calibration(class_bytes_per_s={}, gemm_k_flops_per_s={}, gemm_square_k={}))
    assert rates.bandwidth("reduction") == 2e10 and rates.gemm_flops_per_s("float32", 16) == 1e11


def test_a_class_rate_is_the_median_of_its_mix():
    kernels = {name: float(i) for i, name in enumerate(calibrate_ops.CLASS_MIX["elementwise"], start=1)}
    assert calibrate_ops.class_rates(kernels) == {"elementwise": 3.0}


@pytest.mark.parametrize("changes, says", [
    ({"gemm_k_flops_per_s": {"float32": {"16": 4e11}}}, "the square GEMM measurement was disturbed"),
    ({"gemm_k_flops_per_s": {"float32": {"16": 0.0}}}, "GEMM rate at K=16"),
    ({"gemm_k_flops_per_s": {"float32": {"x": 1e10}}}, "inner dimension 'x'"),
    ({"gemm_k_flops_per_s": {"float32": {}}}, "not a table of K"),
    ({"gemm_square_k": {"float32": 0}}, "square GEMM size"),
    ({"class_bytes_per_s": {"reduction": -1.0}}, "reduction kernels' rate"),
    ({"class_bytes_per_s": {"elementwise": float("inf")}}, "elementwise kernels' rate"),
    ({"class_bytes_per_s": {"reduction": 3e11}}, "the copy measurement was disturbed"),
    ({"class_bytes_per_s": [1]}, "not a table of classes"),
])
def test_implausible_new_figures_are_one_line_and_nothing_is_cached(monkeypatch, changes, says):
    monkeypatch.setattr(calibrate, "measure", lambda threads=None, budget_s=0: calibration(**changes))
    with pytest.raises(CalibrationError) as exc:
        machine.calibration(threads=1)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert not list(machine.path_of({"x": 1}).parent.glob("*.json"))
    assert calibrate.problems(calibration()) == []


def test_a_calibration_of_an_older_schema_is_measured_again(monkeypatch):
    calls = []
    monkeypatch.setattr(calibrate, "measure", lambda threads=None, budget_s=0: calls.append(1) or calibration())
    machine.calibration(threads=1)
    assert machine.calibration(threads=1)[1] and len(calls) == 1  # cached
    monkeypatch.setattr(calibrate, "SCHEMA", calibrate.SCHEMA + 1)
    _, cached = machine.calibration(threads=1)
    assert not cached and len(calls) == 2
