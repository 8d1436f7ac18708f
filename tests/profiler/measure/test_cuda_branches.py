"""Composites that branch on the device (profiler/measure/cuda_branches.py, issue 39), held to the
running torch's own CUDA branch: Dropout.cpp's ``dropout`` on fake CUDA tensors (a forward without
autograd needs no GPU) runs the same ops, with the same dtypes, as the emulation on CPU tensors.
Autograd then saves a bool mask, not the CPU's noise; the composite is back after the context; and
a GPU's step with attention dropout is predicted exactly on every path, smaller than the CPU's."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from dispatched_ops import DispatchedOps
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.cuda_branches import cuda_branches
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.records import Point, Shape

CASES = [(0.1, True, 4), (0.5, True, 4), (0.0, True, 4), (1.0, True, 4), (0.1, False, 4), (0.1, True, 0)]


def _dropout_ops(device: str, p: float, train: bool, rows: int, dtype, emulate: bool):
    with FakeTensorMode(), (cuda_branches() if emulate else _nothing()):
        x = torch.randn(rows, 8, device=device, dtype=dtype)
        with DispatchedOps() as ops:
            y = F.dropout(x, p, train)
    return ops.seen, y is x


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("p, train, rows", CASES)
def test_the_emulation_runs_the_ops_cudas_dropout_runs(p, train, rows, dtype):
    cuda = _dropout_ops("cuda", p, train, rows, dtype, emulate=False)  # the binary's own CUDA branch
    assert _dropout_ops("cpu", p, train, rows, dtype, emulate=True) == cuda


def test_the_cpu_branch_differs_and_is_back_after_the_context():
    cuda = _dropout_ops("cuda", 0.1, True, 4, torch.bfloat16, emulate=False)[0]
    assert cuda == [("native_dropout.default", ("torch.bfloat16", "torch.bool"))]
    cpu = _dropout_ops("cpu", 0.1, True, 4, torch.bfloat16, emulate=False)[0]
    assert [name for name, _ in cpu] == ["empty_like.default", "bernoulli_.float", "div_.Scalar", "mul.Tensor"]
    with cuda_branches(), cuda_branches():  # nested: removed once, by the outermost
        pass
    assert _dropout_ops("cpu", 0.1, True, 4, torch.bfloat16, emulate=False)[0] == cpu


def _saved_dtypes(x: torch.Tensor, p: float) -> list:
    saved = []

    def pack(t):
        saved.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = F.dropout(x, p, True)
    return saved, y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_autograd_saves_a_one_byte_mask_and_the_gradient_is_the_mask_scaled(dtype):
    torch.manual_seed(0)
    x = (torch.rand(64, 32) + 0.5).to(dtype).requires_grad_()  # no zero: a kept element is a nonzero one
    assert _saved_dtypes(x, 0.25)[0] == [dtype]  # the CPU composite: noise of the input's dtype
    with cuda_branches():
        saved, y = _saved_dtypes(x, 0.25)
        y.backward(torch.ones_like(y))
    assert saved == [torch.bool]
    kept = y != 0
    assert 0.6 < kept.float().mean().item() < 0.9  # p = 0.25 of 2048 elements dropped
    torch.testing.assert_close(y[kept], (x / 0.75)[kept].detach())
    torch.testing.assert_close(x.grad, kept.to(dtype) / 0.75)


@pytest.mark.parametrize("variant, dtype, autocast, weight_bytes", [
    ("full[dropout=0.1]", "bfloat16", "", 2), ("full[dropout=0.1]", "float32", "", 4),
    ("full[dropout=0.1]", "float32", "bfloat16", 4),  # CUDA's autocast: a float32 softmax, dropped in float32
    ("talking_heads[dropout=0.1]", "float32", "bfloat16", 2)])  # its post-softmax mixing runs in bfloat16
@pytest.mark.parametrize("mode, layers_saved", [("plain", 3), ("checkpoint", 1), ("reversible", 1)])
def test_a_gpus_step_keeps_a_one_byte_mask_where_the_cpu_keeps_noise(variant, dtype, autocast, weight_bytes, mode,
                                                                     layers_saved, monkeypatch):
    """Every prediction path of a GPU's step equals the full fake run, and the step holds, per layer
    whose attention is saved at the peak (every layer in plain mode, one when recomputed), a bool
    (h, n, n) mask where the CPU's composite keeps a noise tensor of the weights' dtype."""
    point = Point(variant, mode, "model", Shape(seq_len=128, d_model=32, heads=2, layers=3, dtype=dtype,
                                                autocast=autocast))
    gpu = on_device(point, "cuda")
    cuda = account(gpu, fake=True).peak_bytes
    assert predict(gpu).peak_bytes == cuda
    if small_point(gpu):  # also predicted by a real run on CPU tensors, where the same branch runs
        assert account(gpu, fake=False).peak_bytes == cuda
    monkeypatch.setattr("attnprof.profiler.measure.workload.cuda_branches", contextlib.nullcontext)
    composite = account(gpu, fake=True).peak_bytes
    assert composite - cuda == layers_saved * 2 * 128 * 128 * (weight_bytes - 1)


def test_a_probability_outside_zero_to_one_is_refused_as_torch_refuses_it():
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.dropout(x, 1.5, True)  # the CPU composite's own check
    with cuda_branches(), pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.dropout(x, 1.5, True)
