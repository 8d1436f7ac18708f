import pytest
import torch


@pytest.fixture(autouse=True)
def seed():
    """Every test starts from the same RNG state and the default dtype."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    yield
    torch.set_default_dtype(previous)
