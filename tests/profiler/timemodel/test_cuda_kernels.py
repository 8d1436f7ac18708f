"""The CUDA composites: ops the trace sees as one kernel that a GPU runs as two (issue 39)."""

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.timemodel.cuda_kernels import expanded_ops, extra_traffic
from attnprof.profiler.timemodel.rates import Rates, gpu_rates
from attnprof.profiler.timemodel.roofline import predict_time

GIB = 2**30
CPU = Rates(device="test cpu", kind="cpu", peak_flops_per_s={"bfloat16": 1e11}, bandwidth_bytes_per_s=1e10,
            launch_overhead_s=0.0, launch_overhead_bwd_s=0.0)


def test_masked_fill_adds_the_in_place_fill_after_its_clone():
    # (16, 8192, 8192) bf16 scores (2 GiB) and an (8192, 8192) bool mask (64 MiB)
    read, written = 2 * GIB + 64 * 2**20, 2 * GIB
    assert extra_traffic("masked_fill.Scalar", read, written) == (1, 2 * written)
    assert extra_traffic("masked_fill.Tensor", read, written) == (1, 2 * written)
    assert extra_traffic("masked_fill_.Scalar", read, written) == (0, 0.0)  # in place: one kernel, as traced


def test_softmax_backward_adds_the_grad_times_output_kernel():
    read, written = 4 * GIB, 2 * GIB  # reads grad and output (2 GiB each), writes the input gradient
    kernels, extra = extra_traffic("_softmax_backward_data.default", read, written)
    # tmp = grad * output written, then tmp and the output read again by the softmax backward kernel
    assert kernels == 1 and extra == 3 * written


def test_logsumexp_runs_its_nine_kernels():
    # (16, 8192, 64) bf16 in (16 MiB), (16, 8192) out: amax, abs, ==, masked_fill_, sub, exp_, sum, log_, add_
    read, written = 16 * 2**20, 256 * 2**10
    assert extra_traffic("logsumexp.default", read, written) == (8, 5 * read + 14 * written)


@pytest.mark.parametrize("op", ["constant_pad_nd.default", "slice_backward.default"])
def test_a_pad_or_a_slice_gradient_fills_its_output_then_copies_the_input_in(op):
    assert extra_traffic(op, 1000, 1200) == (1, 1000.0)


@pytest.mark.parametrize("op", ["add.Tensor", "_softmax.default", "bmm.default", None])
def test_every_other_op_is_one_kernel_as_traced(op):
    assert extra_traffic(op, 100, 100) == (0, 0.0)


def test_the_expansion_applies_on_a_gpu_and_never_on_the_cpu():
    h200 = get_gpu("h200")
    rows = [["bwd", "_softmax_backward_data.default", 0, 4 * GIB, 2 * GIB, 1]]
    gpu = predict_time(rows, gpu_rates(h200), "bfloat16")
    plain = predict_time([["bwd", "add.Tensor", 0, 4 * GIB, 2 * GIB, 1]], gpu_rates(h200), "bfloat16")
    assert gpu.kernels_bwd == 2 and gpu.time_bwd_ms == pytest.approx(2 * plain.time_bwd_ms, rel=1e-9)
    cpu = predict_time(rows, CPU, "bfloat16")  # the CPU measures softmax backward by name
    assert cpu.kernels_bwd == 1 and cpu.time_bwd_ms == pytest.approx(6 * GIB / 1e10 * 1e3)


def test_expanded_ops_names_what_the_docs_list():
    assert expanded_ops() == ("_softmax_backward_data", "constant_pad_nd", "logsumexp", "masked_fill", "slice_backward")
