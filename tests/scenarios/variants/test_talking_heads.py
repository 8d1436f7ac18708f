"""talking-heads attention (scenarios.variants.talking_heads) against a plain dense float64
reference (helpers_dense.py), and its head mixing really applied."""

import pytest
import torch

from helpers_dense import (build, check_bidirectional_option_looks_ahead, check_causal_never_looks_ahead,
                           check_forward_and_gradients_equal_dense_reference)


@pytest.mark.parametrize("causal", [True, False])
def test_forward_and_gradients_equal_dense_reference(causal):
    check_forward_and_gradients_equal_dense_reference("talking_heads", causal)


def test_causal_never_looks_ahead():
    check_causal_never_looks_ahead("talking_heads")


def test_bidirectional_option_looks_ahead():
    check_bidirectional_option_looks_ahead("talking_heads")


def test_talking_heads_mixing_changes_the_output():
    """The h x h projections are really applied: identity mixing equals full attention."""
    th = build("talking_heads")
    full = build("full")
    full.load_state_dict({k: v for k, v in th.state_dict().items() if not k.endswith("_mix")})
    x = torch.randn(1, 32, 32, dtype=torch.float64)
    assert not torch.allclose(th(x), full(x))
    with torch.no_grad():
        th.pre_mix.copy_(torch.eye(4))
        th.post_mix.copy_(torch.eye(4))
    torch.testing.assert_close(th(x), full(x))
