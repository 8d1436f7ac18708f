"""The SDPA backend choice as torch makes it by default: no forced backend, cuDNN not
deprioritised, no cuBLAS workspace settings from the environment (a fixture the SDPA tests use)."""

import pytest

from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV
from attnprof.profiler.memmodel.sdpa_choice import BACKEND_ENV


@pytest.fixture
def default_backend_choice(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    monkeypatch.delenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", raising=False)
    for name in BLAS_ENV:
        monkeypatch.delenv(name, raising=False)
