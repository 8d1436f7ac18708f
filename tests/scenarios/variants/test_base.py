"""The variants' base (scenarios.variants.base): typed options coerced or refused in one
line, the option machinery of Attention, the projections and head split, and the masks."""

import math

import pytest
import torch

from attnprof.scenarios.variants.base import (Attention, Option, VariantError, causal_mask, mask_value,
                                              positive, power_of_two)


class Mean(Attention):
    """A test-only core: every query gets the mean of the values (no registration)."""
    name = "mean_test"
    OPTIONS = {**Attention.OPTIONS, "width": Option(int, 4, "a width", positive),
               "rate": Option(float, 0.5, "a rate")}

    def core(self, q, k, v):
        return v.mean(dim=2, keepdim=True).expand_as(v)


class Shared(Mean):
    shared_qk = True


@pytest.mark.parametrize("option, raw, value", [
    (Option(int, 1, ""), " 12 ", 12), (Option(float, 1.0, ""), "2.5", 2.5), (Option(float, 1.0, ""), 3, 3.0),
    (Option(bool, True, ""), "No", False), (Option(bool, True, ""), "1", True), (Option(str, "", ""), "x", "x"),
])
def test_options_coerce_text_and_numbers_to_their_type(option, raw, value):
    got = option.coerce("o", raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("option, raw, fragment", [
    (Option(int, 1, ""), "1.5", "option o='1.5' is not an integer"),
    (Option(int, 1, ""), True, "is not an integer"),  # a bool is no integer here
    (Option(bool, True, ""), "maybe", "is not true or false"),
    (Option(float, 1.0, ""), "nan", "is not a finite number"),
    (Option(int, 1, ""), 2 ** 70, "does not fit in int64"),
    (Option(int, 8, "", power_of_two), 12, "option o=12: must be a positive power of two"),
    (Option(int, 1, ""), "x" * 100, "..."),  # a long value is shortened in the message
])
def test_a_bad_option_value_is_one_line_variant_error(option, raw, fragment):
    with pytest.raises(VariantError) as info:
        option.coerce("o", raw)
    assert fragment in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 80


def test_the_checks_accept_what_they_should():
    assert positive(1) is None and positive(0) == "must be positive"
    assert power_of_two(64) is None and power_of_two(0) and power_of_two(6)


def test_options_resolve_with_defaults_and_unknown_ones_name_the_valid_ones():
    assert Mean.resolve_options({"width": "8"}) == {"causal": True, "width": 8, "rate": 0.5}
    with pytest.raises(VariantError, match=r"mean_test has no option 'depth'; valid options: causal \(bool"):
        Mean.resolve_options({"depth": 2})
    with pytest.raises(VariantError, match=r"mean_test: option width=0: must be positive; valid options"):
        Mean.resolve_options({"width": 0})
    assert Mean.layer_period({}) == 1


def test_a_module_projects_splits_heads_and_merges_them_back():
    torch.manual_seed(0)
    module = Mean(32, 4, width=2)
    assert module.width == 2 and module.head_dim == 8 and module.scale == pytest.approx(1 / math.sqrt(8))
    x = torch.randn(2, 6, 32)
    q, k, v = module.project(x)
    assert q.shape == k.shape == v.shape == (2, 4, 6, 8)
    assert module(x).shape == (2, 6, 32)
    expected = module.to_out(module.to_in(x).chunk(3, -1)[2].mean(dim=1, keepdim=True).expand(2, 6, 32))
    torch.testing.assert_close(module(x), expected)
    assert module.core_parameters() == []  # the projections are not the core's


def test_shared_qk_has_one_projection_fewer_and_keys_are_the_queries():
    module = Shared(32, 4)
    assert module.to_in.out_features == 64
    q, k, _ = module.project(torch.randn(1, 5, 32))
    assert q is k


def test_heads_must_divide_d_model():
    with pytest.raises(VariantError, match="d_model 30 is not divisible by heads 4"):
        Mean(30, 4)


def test_the_causal_mask_hides_the_future_and_the_mask_value_stays_finite():
    assert causal_mask(3, 3, "cpu").tolist() == [[False, True, True], [False, False, True], [False, False, False]]
    assert causal_mask(2, 4, "cpu").sum().item() == 3 + 2
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        value = torch.tensor(mask_value(dtype), dtype=dtype)
        assert torch.isfinite(value) and value < -1e4
