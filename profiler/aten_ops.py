"""aten op names that both GPU models need (the memory model and the time model): an op's
base name, and which ops are matrix multiplies. Data only; imports nothing.

The tracer records an op by its overload's name (``mm.default``); its base name (``mm``) is
what the lists below hold.
"""

from __future__ import annotations

# Ops that call cuBLAS/cuBLASLt on a GPU, by base name: the memory model's cuBLAS workspace
# is set up at a thread's first one (memmodel/sdpa_kernels.py).
CUBLAS_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "addmv", "mv", "dot",
                        "vdot", "addr", "matmul", "_scaled_mm", "_int_mm"})
# Every matrix-multiply-like op, by base name: the time model costs these as GEMMs
# (timemodel/op_classes.py). The cuBLAS ops, plus the composites and convolutions.
GEMM_OPS = CUBLAS_OPS | frozenset({"linear", "einsum", "convolution", "_convolution"})


def op_base(op_name: str) -> str:
    """'add.Tensor' -> 'add'; 'aten::mm.default' -> 'mm'."""
    name = op_name.split("::", 1)[-1]
    return name.split(".", 1)[0]
