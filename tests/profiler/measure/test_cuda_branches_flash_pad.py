"""Flash's head-dim padding as CUDA's SDPA composite runs it (profiler/measure/cuda_branches.py,
issue 39; aten/src/ATen/native/transformers/attention.cpp): in fp16/bf16, a head dim that is not a
multiple of 8 is padded with zeros (``constant_pad_nd``, one copy each of q, k, v), flash runs on the
copies with the unpadded scale, and the output is sliced back. The values and gradients are those
of the unpadded call; the ops, and so the GPU step's allocations, are CUDA's."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dispatched_ops import DispatchedOps
from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.cuda_branches import cuda_branches, flash_pads
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.memmodel.gpu_peak import gpu_memory
from attnprof.profiler.memmodel.sdpa_kernels import substitute
from attnprof.profiler.memmodel.trace import record_trace
from attnprof.profiler.predict.fake_run import predict, small_point
from attnprof.profiler.records import Point, Shape

CPU_FLASH = "_scaled_dot_product_flash_attention_for_cpu"


def _qkv(dtype, head_dim: int, kv_heads: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    q = torch.randn(1, 2, 32, head_dim, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(1, kv_heads, 32, head_dim, dtype=dtype, requires_grad=True) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim, kv_heads, causal", [(12, 2, True), (12, 2, False), (5, 1, True), (60, 2, True)])
def test_the_padded_call_has_the_unpadded_values_and_gradients(dtype, head_dim, kv_heads, causal):
    q, k, v = _qkv(dtype, head_dim, kv_heads)
    extra = {"enable_gqa": True} if kv_heads != 2 else {}
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
    ref_grads = torch.autograd.grad(ref.float().square().sum(), (q, k, v))
    with cuda_branches():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    assert out.shape == ref.shape and type(out.grad_fn).__name__ == "SliceBackward0"  # the padded path ran
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def _ops(q, k, v, **kwargs) -> list:
    with cuda_branches(), DispatchedOps() as ops:
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        out.sum().backward()
    return [name.split(".")[0] for name, _ in ops.seen if not name.startswith("detach")]  # (autograd's saved outputs)


def test_the_ops_are_attention_cpps_pad_flash_slice_and_their_backwards():
    q, k, v = _qkv(torch.bfloat16, 12)
    ops = _ops(q, k, v, is_causal=True)
    fwd = ops[:ops.index(CPU_FLASH) + 2]
    assert fwd == ["constant_pad_nd"] * 3 + [CPU_FLASH, "slice"]
    bwd = ops[ops.index("slice_backward"):]  # the output slice's backward: a padded zero gradient first
    assert bwd[1] == CPU_FLASH + "_backward"
    back = [op for op in bwd[2:] if op not in ("new_empty_strided", "copy_")]  # (AccumulateGrad's, for the leaves)
    assert back == ["constant_pad_nd"] * 3  # back to the unpadded head dim: a copy each


@pytest.mark.parametrize("dtype, head_dim, mask, math, why", [
    (torch.float32, 12, False, False, "flash takes no float32: memory-efficient or math, unpadded"),
    (torch.bfloat16, 16, False, False, "a multiple of 8"),
    (torch.bfloat16, 12, True, False, "flash takes no mask"),
    (torch.bfloat16, 260, False, False, "flash takes head dims up to 256"),
    (torch.bfloat16, 12, False, True, "the math path forced: a GPU that runs it pads nothing")])
def test_no_padding_where_flash_does_not_run_the_call(dtype, head_dim, mask, math, why):
    q, k, v = _qkv(dtype, head_dim)
    kwargs = {"attn_mask": torch.ones(32, 32, dtype=torch.bool)} if mask else {}
    with (sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()):
        assert not flash_pads(q, k, v, kwargs.get("attn_mask")), why
        assert "constant_pad_nd" not in _ops(q, k, v, **kwargs), why


def _point(d_model: int, layers: int = 2, dtype: str = "bfloat16", autocast: str = "") -> Point:
    return Point("sdpa", "plain", "model", Shape(seq_len=128, d_model=d_model, heads=4, layers=layers, dtype=dtype,
                                                 autocast=autocast))


@pytest.mark.parametrize("dtype, autocast", [("bfloat16", ""), ("float32", "bfloat16")])  # SDPA in bf16 under autocast
def test_a_gpus_step_pads_every_layers_qkv_and_is_predicted_alike_on_every_path(dtype, autocast, monkeypatch):
    gpu = on_device(_point(40, dtype=dtype, autocast=autocast), "cuda")  # head dim 10 -> 16
    padded = account(gpu, fake=True).peak_bytes
    assert predict(gpu).peak_bytes == padded
    if small_point(gpu):  # the amp point: also a real run on CPU tensors
        assert account(gpu, fake=False).peak_bytes == padded
    events = record_trace(gpu).events
    pads = [e for e in events if e[0] == "op" and e[1].startswith("constant_pad_nd")]
    assert len(pads) == 2 * (3 + 3)  # per layer: q, k, v padded forward, unpadded back in backward
    monkeypatch.setattr("attnprof.profiler.measure.workload.cuda_branches", contextlib.nullcontext)
    assert account(gpu, fake=True).peak_bytes != padded  # the unpadded composite: another step


def _flash_head_dims(events: list) -> list:
    """The head dim of every traced SDPA forward's query."""
    return [e[2]["args"][0].shape[-1] for e in events if e[0] == "op" and e[1].startswith(CPU_FLASH + ".")]


def test_flash_on_a_gpu_runs_on_the_padded_copies_and_fp32_is_untouched():
    h200 = get_gpu("h200")
    assert gpu_memory(_point(40), h200).sdpa_backend == "flash"  # cuDNN and memory-efficient want multiples of 8
    events = record_trace(on_device(_point(40), "cuda")).events
    assert _flash_head_dims(events) == [16, 16]  # each layer's flash call takes the padded q, k, v
    pads = {e[1] for e in events if e[0] == "alloc" and e[3].startswith("constant_pad_nd")}
    sub = substitute(events, h200, "flash")
    assert pads and pads <= {e[1] for e in sub.events if e[0] == "alloc"}  # the copies stay on the GPU
    fp32 = record_trace(on_device(_point(40, dtype="float32"), "cuda")).events
    assert _flash_head_dims(fp32) == [10, 10]
    assert not any(e[0] == "op" and e[1].startswith("constant_pad_nd") for e in fp32)
