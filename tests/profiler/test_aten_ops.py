"""profiler/aten_ops.py: the one list of matrix multiplies both GPU models read."""

from __future__ import annotations

from attnprof.profiler.aten_ops import CUBLAS_OPS, GEMM_OPS, op_base
from attnprof.profiler.timemodel.op_classes import kernel_class


def test_op_base_drops_the_namespace_and_the_overload():
    assert op_base("mm.default") == "mm"
    assert op_base("aten::addmm.out") == "addmm"
    assert op_base("copy_") == "copy_"


def test_every_cublas_op_is_a_gemm_and_the_time_model_costs_it_so():
    assert CUBLAS_OPS < GEMM_OPS
    assert all(kernel_class(f"{name}.default") == "gemm" for name in GEMM_OPS)
    assert {"linear", "einsum", "convolution"} <= GEMM_OPS - CUBLAS_OPS  # no cuBLAS workspace of their own
