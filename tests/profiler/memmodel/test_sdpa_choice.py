"""Which SDPA backend the GPU would run (profiler.memmodel.sdpa_choice): the kernels'
constraints, the user's overrides, torch's priority order and its cuDNN preference."""

import pytest
import torch

from attnprof.errors import UserError
from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.memmodel.sdpa_choice import BACKEND_ENV, choose_sdpa_backend


pytestmark = pytest.mark.usefixtures("default_backend_choice")  # conftest.py


@pytest.mark.parametrize("gpu,dtype,head_dim,grad,backend", [
    ("a100-80gb", "bfloat16", 64, True, "flash"),
    ("a100-80gb", "float16", 256, True, "flash"),
    ("a100-80gb", "float32", 64, True, "efficient"),  # flash takes fp16/bf16 only
    ("a100-80gb", "float64", 64, True, "math"),  # neither fused kernel takes fp64
    ("a100-80gb", "bfloat16", 320, True, "efficient"),  # flash: head_dim <= 256
    ("a100-80gb", "float32", 66, True, "math"),  # memory-efficient: head_dim divisible by 4 (fp32)
    ("l4", "bfloat16", 208, True, "efficient"),  # sm89: no flash backward for head_dim in (192, 224]
    ("l4", "bfloat16", 208, False, "flash"),  # ... forward only is fine
    ("l4", "bfloat16", 256, True, "flash"),  # ... above 224 only with dropout (below)
    ("h100-sxm", "bfloat16", 64, True, "cudnn"),  # recent torch prefers cuDNN on sm90
    ("h100-sxm", "bfloat16", 256, True, "flash"),  # cuDNN: head_dim <= 128 (as modelled)
    ("h200", "float32", 64, True, "efficient"),
])
def test_sdpa_backend_choice(gpu, dtype, head_dim, grad, backend):
    assert choose_sdpa_backend(get_gpu(gpu), dtype, head_dim, requires_grad=grad).backend == backend


def test_sdpa_backend_overrides(monkeypatch):
    h100 = get_gpu("h100-sxm")
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    assert choose_sdpa_backend(h100, "bfloat16", 64).backend == "flash"
    monkeypatch.setenv(BACKEND_ENV, "efficient")
    assert choose_sdpa_backend(h100, "bfloat16", 64).backend == "efficient"
    monkeypatch.setenv(BACKEND_ENV, "fastest")
    with pytest.raises(UserError, match=BACKEND_ENV):
        choose_sdpa_backend(h100, "bfloat16", 64)


# --- the order comes from the running torch; the cuDNN preference by torch version ----------------
def test_the_priority_order_and_enabled_backends_are_torchs(monkeypatch):
    from attnprof.profiler.memmodel import sdpa_choice

    facts = sdpa_choice.torch_facts()
    assert facts["order"][:3] == ["flash", "efficient", "math"]  # at::Context's default on 2.11 / 2.13
    h100 = get_gpu("h100-sxm")
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)
    assert choose_sdpa_backend(h100, "bfloat16", 64).backend == "flash"  # a user's disabled cuDNN is honoured
    monkeypatch.setattr(torch.backends.cuda, "flash_sdp_enabled", lambda: False)
    assert choose_sdpa_backend(h100, "bfloat16", 64).backend == "efficient"


@pytest.mark.parametrize("torch_version,cudnn,cc,prefers", [
    ((2, 13), 91900, (9, 0), True), ((2, 13), 91500, (9, 0), False),  # "newer than 9.15"
    ((2, 11), 91900, (10, 3), True), ((2, 11), 91900, (8, 0), False),
    ((2, 8), 90900, (9, 0), True), ((2, 8), 90800, (9, 0), False), ((2, 8), 91900, (10, 3), False),
])
def test_the_cudnn_preference_by_torch_version(torch_version, cudnn, cc, prefers):
    from dataclasses import replace

    from attnprof.profiler.memmodel.sdpa_choice import prefers_cudnn

    gpu = replace(get_gpu("h100-sxm"), compute_capability=cc)
    assert prefers_cudnn(gpu, cudnn, torch_version) is prefers


@pytest.mark.parametrize("head_dim, dropout, backend", [(192, 0.1, "flash"), (224, 0.0, "efficient"),
                                                        (232, 0.0, "flash"), (232, 0.1, "efficient")])
def test_flash_backward_on_sm89_follows_torchs_head_dim_and_dropout_rule(head_dim, dropout, backend):
    """sdp_utils.cpp check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89: (192, 224] never,
    above 224 not with dropout."""
    assert choose_sdpa_backend(get_gpu("l4"), "bfloat16", head_dim, dropout=dropout).backend == backend
