"""A device's rates (profiler.timemodel.rates): the GEMM rate by inner dimension K,
bandwidth by kernel class and by op, fresh-page faults, and a named GPU's datasheet rates."""

import math

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.timemodel import constants as C
from attnprof.profiler.timemodel.rates import Rates, gpu_rates, interpolate_log

THIN = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"float32": 2e11}, bandwidth_bytes_per_s=1e12,
             launch_overhead_s=0.0, launch_overhead_bwd_s=0.0,
             gemm_k_flops_per_s={"float32": {"16": 1e10, "256": 1.6e11}}, gemm_square_k={"float32": 1024})


def test_the_rate_is_interpolated_in_log_k_and_clamped_at_both_ends():
    assert THIN.gemm_flops_per_s("float32", 8) == 1e10
    assert THIN.gemm_flops_per_s("float32", 16) == 1e10
    assert THIN.gemm_flops_per_s("float32", 64) == pytest.approx(8.5e10)  # halfway 16 -> 256 in log K
    assert THIN.gemm_flops_per_s("float32", 512) == pytest.approx(1.8e11)  # halfway to the square rate at 1024
    assert THIN.gemm_flops_per_s("float32", 1 << 20) == 2e11
    assert THIN.gemm_flops_per_s("float32", None) == 2e11  # K unknown: the square rate
    assert THIN.gemm_flops_per_s("bfloat16", 64) is None
    assert interpolate_log([(1.0, 0.0), (100.0, 2.0)], 10.0) == pytest.approx(1.0)


def test_a_gpu_keeps_one_gemm_efficiency_whatever_k():
    rates = gpu_rates(get_gpu("a100-80gb"))
    assert rates.gemm_flops_per_s("float32", 16) == rates.gemm_flops_per_s("float32", 4096)
    assert rates.gemm_flops_per_s("float32", 16) == pytest.approx(19.5e12 * C.GEMM_EFFICIENCY)


def test_bandwidth_is_the_ops_own_rate_else_its_classs_else_the_default():
    rates = Rates(device="d", kind="cpu", peak_flops_per_s={}, bandwidth_bytes_per_s=1e10, launch_overhead_s=1e-6,
                  launch_overhead_bwd_s=3e-6, bandwidth_efficiency={"*": 0.5, "reduction": 0.25},
                  op_bytes_per_s={"sum": 7e9}, attention_efficiency={"float32": (0.5, 0.25)})
    assert rates.bandwidth("elementwise") == 5e9 and rates.bandwidth("reduction") == 2.5e9
    assert rates.op_bandwidth("sum", "reduction") == 7e9 and rates.op_bandwidth("mean", "reduction") == 2.5e9
    assert rates.attention("float32", backward=False) == 0.5 and rates.attention("float32", backward=True) == 0.25
    assert rates.attention("bfloat16", backward=False) == 1.0  # no entry, no "*": efficiency 1
    assert rates.overhead_s(backward=True) == 3e-6 and rates.overhead_s(backward=False) == 1e-6
    assert rates.peak("float32") is None and rates.gemm_flops_per_s("float32") is None


def test_fresh_pages_cost_only_outputs_over_the_threshold():
    rates = Rates(device="d", kind="cpu", peak_flops_per_s={}, bandwidth_bytes_per_s=1e10, launch_overhead_s=0,
                  launch_overhead_bwd_s=0, fresh_page_bytes_per_s=1e9, fresh_output_bytes=1000)
    assert rates.fresh_output_s(999) == 0.0
    assert rates.fresh_output_s(2e9) == pytest.approx(2.0)
    assert THIN.fresh_output_s(1e12) == 0.0  # no measured fault rate: no cost
    assert Rates(**rates.to_dict()) == rates


def test_a_gpus_rates_are_its_datasheet_times_the_familys_efficiencies():
    h100 = get_gpu("h100-sxm")
    rates = gpu_rates(h100, "")
    assert rates.kind == "gpu" and rates.device == "h100-sxm" and rates.sdpa_backend == "flash"
    assert rates.bandwidth_bytes_per_s == h100.bandwidth_bytes_per_s
    assert rates.bandwidth("elementwise") == pytest.approx(h100.bandwidth_bytes_per_s * C.BANDWIDTH_EFFICIENCY)
    assert rates.bandwidth("gather_scatter_sort") < rates.bandwidth("elementwise")
    assert rates.peak("bfloat16") == pytest.approx(h100.tflops[C.GPU_PEAK_KEY["bfloat16"]] * 1e12)
    assert any("h100-sxm" in line for line in rates.source)
    math = gpu_rates(h100, "math")  # no fused kernel: attention runs at the GEMM efficiency
    assert math.attention("bfloat16", backward=True) == C.GEMM_EFFICIENCY


def test_fused_attention_is_less_efficient_at_head_dim_64_by_the_published_ratio():
    cudnn = gpu_rates(get_gpu("h200"), "cudnn")
    fwd128, bwd128 = C.ATTENTION_EFFICIENCY["hopper"]["cudnn"]
    assert cudnn.attention("bfloat16", False, 128) == fwd128 and cudnn.attention("bfloat16", True, 256) == bwd128
    assert cudnn.attention("bfloat16", False, None) == fwd128  # head dim unknown: the d128 constant
    assert cudnn.attention("bfloat16", False, 64) == pytest.approx(fwd128 * 497 / 648)  # FA3 Figs. 5a/5c
    assert cudnn.attention("bfloat16", True, 32) == pytest.approx(bwd128 * 474 / 561)  # below 64: as at 64
    mid = cudnn.attention("bfloat16", False, 90)  # log2-linear between 64 and 128
    t = math.log2(90 / 64)
    assert mid == pytest.approx(fwd128 * (497 / 648 + t * (1 - 497 / 648)))
    efficient = gpu_rates(get_gpu("h200"), "efficient")  # nothing published by head dim
    assert efficient.attention("float32", False, 64) == efficient.attention("float32", False, 128)
