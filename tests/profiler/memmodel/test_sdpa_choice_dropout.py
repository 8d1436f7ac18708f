"""SDPA with attention dropout on a GPU (issue 39): CUDA's fused kernels take dropout where the CPU's
flash kernel sends it to the math path, so a GPU's step is traced with the fused op
(measure/cuda_branches.py) and the backend chosen with cuDNN's dropout rules; flash's dropout
keeps a second RNG state and never splits K/V; the math path, where a GPU runs it, drops with
native_dropout, op for op as torch's math path on (fake) CUDA tensors."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel

from dispatched_ops import DispatchedOps
from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.measure.cuda_branches import cuda_branches
from attnprof.profiler.memmodel.gpu_peak import gpu_memory
from attnprof.profiler.memmodel.sdpa_choice import BACKEND_ENV, choose_sdpa_backend, cudnn_dropout_problem
from attnprof.profiler.memmodel.sdpa_kernels import substitute
from attnprof.profiler.memmodel.trace import record_trace
from attnprof.profiler.records import Point, Shape


pytestmark = pytest.mark.usefixtures("default_backend_choice")  # conftest.py


def _sdpa_ops(device: str, emulate: bool, math: bool) -> list:
    with FakeTensorMode(), (cuda_branches() if emulate else contextlib.nullcontext()), \
            (sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()):
        q = torch.randn(1, 2, 16, 8, device=device, dtype=torch.bfloat16)
        with DispatchedOps() as ops:
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    return ops.seen


def test_the_math_path_drops_as_torchs_math_path_on_cuda_tensors():
    cuda = _sdpa_ops("cuda", emulate=False, math=True)  # the binary's own math path on (fake) CUDA tensors
    assert ("native_dropout.default", ("torch.float32", "torch.bool")) in cuda
    assert _sdpa_ops("cpu", emulate=True, math=True) == cuda
    assert _sdpa_ops("cpu", emulate=False, math=True) != cuda  # the CPU's composite dropout: a float noise


def test_a_gpus_sdpa_with_dropout_is_traced_as_the_fused_op():
    assert [op for op, _ in _sdpa_ops("cpu", emulate=True, math=False)] == [
        "_scaled_dot_product_flash_attention_for_cpu.default"]
    assert "_safe_softmax.default" in [op for op, _ in _sdpa_ops("cpu", emulate=False, math=False)]


@pytest.mark.parametrize("dropout, cudnn, refused", [
    (0.0, 91900, False), (0.125, 91900, False), (0.5, 91900, False), (0.1, 91900, True), (0.3, 91900, True),
    (0.125, 91200, True), (0.0, 91200, False), (0.125, 91100, False), (0.125, 91400, False)])
def test_cudnn_takes_dropout_in_sixteenths_and_not_on_cudnn_9_11_to_9_13(dropout, cudnn, refused):
    assert (cudnn_dropout_problem(dropout, cudnn) is not None) == refused


def test_a_dropout_cudnn_refuses_goes_to_flash_on_an_h200():
    h200 = get_gpu("h200")
    assert choose_sdpa_backend(h200, "bfloat16", 64, dropout=0.125).backend == "cudnn"
    choice = choose_sdpa_backend(h200, "bfloat16", 64, dropout=0.1)
    assert choice.backend == "flash" and "1/16" in choice.reason


def _point(label: str, n: int = 1024, forward_only: bool = False, batch: int = 1) -> Point:
    return Point(label, "plain", "model", Shape(seq_len=n, d_model=256, heads=4, layers=2, dtype="bfloat16",
                                                batch=batch), forward_only=forward_only)


@pytest.mark.parametrize("gpu, backend", [("h200", "flash"), ("a100-80gb", "flash")])
def test_sdpa_with_dropout_fits_as_the_fused_kernel_not_the_math_path(gpu, backend):
    spec = get_gpu(gpu)
    dropped, plain = gpu_memory(_point("sdpa[dropout=0.1]"), spec), gpu_memory(_point("sdpa"), spec)
    assert dropped.sdpa_backend == backend
    assert dropped.allocated_peak_bytes == plain.allocated_peak_bytes  # two RNG states: one 512-byte block each
    assert any("dropout inside SDPA's flash kernel" in note for note in dropped.notes)


def test_a_forward_only_point_with_dropout_has_no_split_kv_buffers(monkeypatch):
    """A forward pass of one short sequence on an H200 splits K/V without dropout (flash forced for
    the plain point: its trace is the same fused op), never with it."""
    h200 = get_gpu("h200")
    dropped = gpu_memory(_point("sdpa[dropout=0.1]", forward_only=True), h200)
    monkeypatch.setenv(BACKEND_ENV, "flash")
    plain = gpu_memory(_point("sdpa", forward_only=True), h200)
    assert dropped.sdpa_backend == plain.sdpa_backend == "flash"
    assert dropped.allocated_peak_bytes < plain.allocated_peak_bytes


def test_flash_with_dropout_keeps_a_second_rng_state_and_never_splits_kv():
    """flash_api.cpp mha_fwd: ``if (p_dropout > 0.0)`` a second rng_state replaces the first;
    set_params_splitkv splits only without dropout. A forward-only point of one short sequence
    is where flash splits K/V without dropout."""
    h200 = get_gpu("h200")
    events = record_trace(_point("sdpa[dropout=0.1]", n=2048, forward_only=True)).events
    plain, dropped = substitute(events, h200, "flash"), substitute(events, h200, "flash", dropout=0.1)
    names = lambda sub: [e[1].split("#")[0] for e in sub.events if e[0] == "alloc" and "flash" in str(e[1])]  # noqa: E731
    assert "flash.softmax_lse_accum" in names(plain) and "flash.softmax_lse_accum" not in names(dropped)
    assert names(plain).count("flash.rng_state") == 2  # one per layer
    assert names(dropped).count("flash.rng_state") == 4  # two per layer, the first freed
