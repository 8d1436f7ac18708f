"""The time model's record fields (profiler.timemodel.fields): the roofline's answer in ms
to DIGITS places, tokens per second on a GPU, and None wherever the model has no answer."""

import dataclasses

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.timemodel.fields import (GPU_TIME_FIELDS, TIME_FIELDS, gpu_time_fields, rates_from_dict,
                                                time_fields)
from attnprof.profiler.timemodel.rates import Rates

CPU = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"float32": 1e11}, bandwidth_bytes_per_s=1e10,
            launch_overhead_s=1e-6, launch_overhead_bwd_s=2e-6)
POINT = Point("full", "plain", "model", Shape(batch=2, seq_len=512, d_model=64, heads=4, layers=1))
# forward: 1 s of GEMM compute plus one launch; backward: 0.1 s of memory traffic plus one launch
ROWS = [["fwd", "mm.default", 10**11, 1000, 1000, 1], ["bwd", "add.Tensor", 0, 6 * 10**8, 4 * 10**8, 1]]


def test_the_cpu_fields_are_the_roofline_in_ms_rounded_once():
    fields = time_fields(POINT, ROWS, CPU)
    assert set(fields) == set(TIME_FIELDS)
    assert fields["predicted_time_fwd_ms"] == pytest.approx(1000.001)
    assert fields["predicted_time_bwd_ms"] == pytest.approx(100.002)
    assert fields["predicted_time_fwd_ms"] == round(fields["predicted_time_fwd_ms"], 4)


def test_no_rates_no_rows_or_no_peak_for_the_dtype_is_none_never_a_guess():
    assert time_fields(POINT, ROWS, None) == dict.fromkeys(TIME_FIELDS)
    assert time_fields(POINT, [], CPU) == dict.fromkeys(TIME_FIELDS)
    fp64 = dataclasses.replace(POINT, shape=dataclasses.replace(POINT.shape, dtype="float64"))
    assert time_fields(fp64, ROWS, CPU) == dict.fromkeys(TIME_FIELDS)
    assert gpu_time_fields(POINT, [], get_gpu("h100-sxm")) == dict.fromkeys(GPU_TIME_FIELDS)


def test_the_gpu_fields_count_tokens_per_second_of_the_step():
    fields = gpu_time_fields(POINT, ROWS, get_gpu("h100-sxm"))
    assert set(fields) == set(GPU_TIME_FIELDS)
    step_ms = fields["gpu_time_fwd_ms"] + fields["gpu_time_bwd_ms"]
    assert 0 < fields["gpu_time_fwd_ms"] < time_fields(POINT, ROWS, CPU)["predicted_time_fwd_ms"]
    assert fields["gpu_tokens_per_s"] == pytest.approx(2 * 512 / (step_ms / 1e3), rel=1e-3)


def test_rates_come_back_from_a_sweeps_settings_dict():
    assert rates_from_dict(None) is None and rates_from_dict({}) is None
    assert rates_from_dict(CPU) is CPU
    assert rates_from_dict(dataclasses.asdict(CPU)) == CPU
