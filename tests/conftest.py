import pytest
import torch


@pytest.fixture(autouse=True)
def seed():
    """Every test starts from the same RNG state and the default dtype."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(autouse=True)
def prediction_cache_dir(tmp_path_factory, monkeypatch):
    """Every test predicts into a fresh, empty prediction cache of its own: none ever reads
    or writes the user's (~/.cache/attnprof), and no test sees another's entries."""
    path = tmp_path_factory.mktemp("attnprof-cache")
    monkeypatch.setenv("ATTNPROF_CACHE_DIR", str(path))
    return path
