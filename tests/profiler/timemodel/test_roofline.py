"""The roofline sum on hand-made op rows, on this machine's kind of Rates and on a GPU's."""

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.timemodel import constants as C
from attnprof.profiler.timemodel.rates import Rates, gpu_rates
from attnprof.profiler.timemodel.roofline import predict_time

CPU = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"float32": 1e11}, bandwidth_bytes_per_s=1e10,
            launch_overhead_s=1e-6, launch_overhead_bwd_s=2e-6, attention_efficiency={"float32": (0.5, 0.25)})
ATT = "_scaled_dot_product_flash_attention_for_cpu.default"
ATT_BWD = "_scaled_dot_product_flash_attention_for_cpu_backward.default"


def test_a_compute_bound_gemm_costs_its_flops_and_a_memory_bound_op_its_bytes():
    rows = [["fwd", "mm.default", 10**11, 1000, 1000, 2],  # 1 s of compute each, bytes negligible
            ["fwd", "add.Tensor", 0, 6 * 10**9, 4 * 10**9, 1]]  # 1e10 bytes at 1e10 B/s: 1 s
    t = predict_time(rows, CPU, "float32")
    assert t.kernels_fwd == 3 and t.kernels_bwd == 0 and t.time_bwd_ms is None
    assert t.time_fwd_ms == pytest.approx(3000 + 3 * 1e-3)
    assert t.by_class_ms["gemm"] == pytest.approx(2000) and t.by_class_ms["elementwise"] == pytest.approx(1000)


def test_the_slower_of_compute_and_memory_wins():
    compute_bound = predict_time([["fwd", "mm.default", 10**11, 10**9, 0, 1]], CPU, "float32")
    memory_bound = predict_time([["fwd", "mm.default", 10**9, 10**10, 10**10, 1]], CPU, "float32")
    assert compute_bound.time_fwd_ms == pytest.approx(1000 + 1e-3)  # 1 s compute > 0.1 s memory
    assert memory_bound.time_fwd_ms == pytest.approx(2000 + 1e-3)  # 2 s memory > 10 ms compute


def test_views_are_free_and_passes_are_separate():
    rows = [["fwd", "_unsafe_view.default", 0, 10**9, 10**9, 50], ["fwd", "detach.default", 0, 0, 0, 9],
            ["bwd", "mul.Tensor", 0, 10**8, 10**8, 3]]
    t = predict_time(rows, CPU, "float32")
    assert t.time_fwd_ms == 0 and t.kernels_fwd == 0
    assert t.kernels_bwd == 3 and t.time_bwd_ms == pytest.approx(3 * (20 + 2e-3))


def test_fused_attention_takes_its_own_efficiency_forward_and_backward():
    rows = [["fwd", ATT, 10**11, 0, 0, 1], ["bwd", ATT_BWD, 10**11, 0, 0, 1]]
    t = predict_time(rows, CPU, "float32")
    assert t.time_fwd_ms == pytest.approx(2000 + 1e-3) and t.time_bwd_ms == pytest.approx(4000 + 2e-3)


def test_no_rates_no_rows_or_no_peak_for_the_dtype_is_no_prediction():
    rows = [["fwd", "mm.default", 10**9, 0, 0, 1]]
    assert predict_time(rows, None, "float32") is None
    assert predict_time([], CPU, "float32") is None
    assert predict_time(rows, CPU, "bfloat16") is None  # never a rate made up for a dtype not measured


def test_a_gpu_costs_sdpa_as_its_fused_kernel_and_the_math_path_costs_more():
    h100 = get_gpu("h100-sxm")
    B, H, n, d = 1, 16, 8192, 64
    flops, qkv = 4 * B * H * n * n * d, 3 * B * H * n * d * 2
    rows = [["fwd", ATT, flops, qkv, qkv // 3, 1]]
    flash = predict_time(rows, gpu_rates(h100, "flash"), "bfloat16")
    fwd_eff = C.ATTENTION_EFFICIENCY["hopper"]["flash"][0]
    assert flash.kernels_fwd == 1
    # a kernel longer than its launch hides it (issue 39: the launch is a floor on a GPU, not a sum)
    assert flash.time_fwd_ms == pytest.approx(flops / (989.4e12 * fwd_eff) * 1e3)
    math = predict_time(rows, gpu_rates(h100, "math"), "bfloat16", head_dim=d)
    assert math.kernels_fwd > 1 and math.time_fwd_ms > 2 * flash.time_fwd_ms  # n x n scores through HBM
    assert predict_time(rows, gpu_rates(h100, "math"), "bfloat16") is None  # math needs the head dim


def test_gpu_float32_matmuls_use_the_fp32_peak_not_tf32():
    a100 = get_gpu("a100-80gb")
    t = predict_time([["fwd", "mm.default", 10**12, 0, 0, 1]], gpu_rates(a100), "float32")
    assert t.time_fwd_ms == pytest.approx(1e12 / (19.5e12 * C.GEMM_EFFICIENCY) * 1e3)  # the launch hidden under it


def test_on_a_gpu_the_launch_is_a_floor_under_each_kernel_not_a_sum():
    h200 = gpu_rates(get_gpu("h200"))
    tiny = [["fwd", "add.Tensor", 0, 2048, 1024, 10]]  # 10 kernels of ~1 ns each: the GPU waits on the host
    t = predict_time(tiny, h200, "bfloat16")
    assert t.time_fwd_ms == pytest.approx(10 * C.LAUNCH_OVERHEAD_S * 1e3)
    assert t.by_class_ms["overhead"] == pytest.approx(t.time_fwd_ms - t.by_class_ms["elementwise"])
    big = [["fwd", "add.Tensor", 0, 2 * 10**9, 10**9, 1]]  # 3 GB: far longer than a launch, which it hides
    b = predict_time(big, h200, "bfloat16")
    assert b.time_fwd_ms == pytest.approx(3e9 / h200.bandwidth("elementwise") * 1e3)
    assert "overhead" not in b.by_class_ms
    # the CPU adds its per-op cost to every op, however long
    cpu = predict_time([["fwd", "add.Tensor", 0, 6 * 10**9, 4 * 10**9, 1]], CPU, "float32")
    assert cpu.time_fwd_ms == pytest.approx(1e3 + 1e-3)
