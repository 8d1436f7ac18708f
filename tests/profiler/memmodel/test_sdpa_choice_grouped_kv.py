"""Grouped KV heads and attention dropout in the GPU memory model (issue 24): SDPA with
enable_gqa gets flash (which admits grouped heads) or math, never a kernel whose grouped-head
rule is not modelled; flash's backward keeps dk/dv at K heads (plus the H-head expanded
temporaries); predict --gpu runs for --kv-heads, --rope and dropout and says what it does
not model."""

import pytest

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.gpu_peak import gpu_memory
from attnprof.profiler.memmodel.sdpa_choice import choose_sdpa_backend
from attnprof.profiler.records import Point, Shape


pytestmark = pytest.mark.usefixtures("default_backend_choice")  # conftest.py


@pytest.mark.parametrize("gpu,dtype,backend,grouped_backend", [
    ("h100-sxm", "bfloat16", "cudnn", "flash"),  # cuDNN preferred, but its GQA rule is not modelled
    ("a100-80gb", "bfloat16", "flash", "flash"),
    ("a100-80gb", "float32", "efficient", "math"),  # flash needs fp16/bf16; efficient's GQA rule not modelled
])
def test_grouped_kv_heads_take_flash_or_math(gpu, dtype, backend, grouped_backend):
    spec = get_gpu(gpu)
    assert choose_sdpa_backend(spec, dtype, 64).backend == backend
    choice = choose_sdpa_backend(spec, dtype, 64, grouped_kv=True)
    assert choice.backend == grouped_backend
    if grouped_backend != backend:
        assert "grouped KV heads" in choice.reason


def point(label, kv_heads=0, rope=False, dtype="bfloat16"):
    return Point(label, "plain", "model", Shape(batch=1, seq_len=256, d_model=64, heads=4, layers=1,
                                                kv_heads=kv_heads, rope=rope, dtype=dtype))


def test_flash_backward_keeps_kv_gradients_at_kv_heads(monkeypatch):
    """Scope attention, bf16 on an H100 (flash for both, cuDNN disabled); the peak is inside
    flash's backward. MQA's K/V inputs and its dk/dv are each 2 x B x (H - 1) x n x dh x 2
    bytes smaller, but mha_bwd's dk_expanded/dv_expanded (2 x B x n x H x dh x 2) live there."""
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    h100 = get_gpu("h100-sxm")
    at = lambda kv: Point("sdpa", "none", "attention", Shape(batch=2, seq_len=512, d_model=256, heads=4,  # noqa: E731
                                                             kv_heads=kv, dtype="bfloat16"))
    mha, mqa = gpu_memory(at(4), h100), gpu_memory(at(1), h100)
    assert mha.sdpa_backend == mqa.sdpa_backend == "flash"
    closed, expanded = 2 * 2 * 3 * 512 * 64 * 2, 2 * 2 * 512 * 4 * 64 * 2
    # issue 39: the device also holds the uncounted projections (memmodel/trace.py held_parameters);
    # MQA's to_in is d -> d + 2 x 64 instead of d -> 3d
    projections = (256 * 768 - 256 * (256 + 2 * 64)) * 2
    assert mha.tensor_peak_bytes - mqa.tensor_peak_bytes == 2 * closed - expanded + projections


@pytest.mark.parametrize("label,kv_heads,rope", [("sdpa", 1, True), ("full", 2, True), ("sdpa[dropout=0.1]", 2, False),
                                                 ("full[dropout=0.1]", 0, False)])
def test_predict_gpu_runs_and_says_what_it_does_not_model(label, kv_heads, rope):
    result = gpu_memory(point(label, kv_heads, rope), get_gpu("h100-sxm"))
    assert result.allocated_peak_bytes > 0
    assert any("dropout" in note for note in result.notes) == ("dropout" in label)
