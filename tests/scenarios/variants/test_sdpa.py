"""torch's scaled_dot_product_attention (scenarios.variants.sdpa) against a plain dense float64 reference (helpers_dense.py)."""

import pytest

from helpers_dense import (check_bidirectional_option_looks_ahead, check_causal_never_looks_ahead,
                           check_forward_and_gradients_equal_dense_reference)


@pytest.mark.parametrize("causal", [True, False])
def test_forward_and_gradients_equal_dense_reference(causal):
    check_forward_and_gradients_equal_dense_reference("sdpa", causal)


def test_causal_never_looks_ahead():
    check_causal_never_looks_ahead("sdpa")


def test_bidirectional_option_looks_ahead():
    check_bidirectional_option_looks_ahead("sdpa")
