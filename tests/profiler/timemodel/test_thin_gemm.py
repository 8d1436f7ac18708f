"""GEMM rate by inner dimension K: K read off real op rows and used by the model (the rate's
interpolation in log K, and a GPU's one efficiency: test_rates.py)."""

import pytest

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.timemodel.rates import Rates
from attnprof.profiler.timemodel.roofline import gemm_inner_dim, predict_time

THIN = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"float32": 2e11}, bandwidth_bytes_per_s=1e12,
             launch_overhead_s=0.0, launch_overhead_bwd_s=0.0,
             gemm_k_flops_per_s={"float32": {"16": 1e10, "256": 1.6e11}}, gemm_square_k={"float32": 1024})


def test_the_inferred_k_of_full_attentions_matmuls_is_head_dim_and_seq_len():
    shape = Shape(seq_len=64, d_model=64, heads=2)  # head_dim 32
    rows = predict(Point(variant="full", mode="plain", scope="attention", shape=shape)).op_costs
    ks = {gemm_inner_dim(op, flops, written, "float32") for pass_, op, flops, _, written, _ in rows
          if pass_ == "fwd" and op == "bmm.default"}
    assert ks == {shape.head_dim, shape.seq_len}  # Q K^T has K = head_dim; P V has K = n


def test_k_is_inferred_only_for_matmuls_with_an_output():
    assert gemm_inner_dim("bmm.default", 2 * 8 * 16 * 32, 8 * 16 * 2, "bfloat16") == 32
    assert gemm_inner_dim("addmm.default", 2 * 10 * 20 * 7, 10 * 20 * 4, "float32") == 7
    assert gemm_inner_dim("mm.default", 1000, 0, "float32") is None
    assert gemm_inner_dim("einsum.default", 1000, 10, "float32") is None
    assert gemm_inner_dim(None, 1000, 10, "float32") is None


def test_the_model_costs_a_thin_gemm_at_its_k_rate():
    flops = 10**10
    thin = ["fwd", "bmm.default", flops, 0, flops * 4 // (2 * 16), 1]  # K = 16
    wide = ["fwd", "bmm.default", flops, 0, flops * 4 // (2 * 4096), 1]  # K = 4096
    assert predict_time([thin], THIN, "float32").time_fwd_ms == pytest.approx(1000)  # at 1e10 FLOP/s
    assert predict_time([wide], THIN, "float32").time_fwd_ms == pytest.approx(50)  # at the square 2e11
