"""Attention dropout (issue 24): the ``dropout`` option of full, talking_heads and sdpa.
Checked and refused like every option, read alike by the catalog and the registry; it
drops weights only while training (eval and p = 0: exactly the undropped variant); the
dropped weights keep the variant's shapes and gradients; memory: the mask is counted."""

import pytest
import torch

from attnprof.scenarios.variants import catalog
from attnprof.scenarios.variants.base import VariantError
from attnprof.scenarios.variants.registry import VariantSpec, parse_variant
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.records import Point, Shape

NAMES = ["full", "talking_heads", "sdpa"]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("name", NAMES)
def test_the_option_parses_and_labels(name):
    spec = parse_variant(f"{name}[dropout=0.1]")
    assert spec.options == {"dropout": 0.1} and spec.label == f"{name}[dropout=0.1]"
    assert catalog.label_problem(f"{name}[dropout=0.1]") is None
    assert catalog.find(name).option("dropout").default == 0.0


@pytest.mark.parametrize("value", ["1.0", "-0.1", "2", "nan", "x"])
def test_a_bad_probability_is_refused_in_one_line(value):
    with pytest.raises(VariantError) as exc:
        parse_variant(f"full[dropout={value}]")
    assert "\n" not in str(exc.value) and "dropout" in str(exc.value)


def test_variants_without_dropout_refuse_it():
    assert "has no option 'dropout'" in catalog.label_problem("sparse_strided[dropout=0.1]")
    with pytest.raises(VariantError):
        parse_variant("lsh[dropout=0.1]")


@pytest.mark.parametrize("name", NAMES)
def test_dropout_acts_only_while_training(name):
    torch.set_default_dtype(torch.float64)
    try:
        plain = VariantSpec(name).build(32, 4)
        dropped = VariantSpec(name, {"dropout": 0.5}).build(32, 4)
    finally:
        torch.set_default_dtype(torch.float32)
    dropped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 16, 32, dtype=torch.float64, requires_grad=True)
    training = dropped(x)
    assert training.shape == plain(x).shape and not torch.allclose(training, plain(x))
    training.sum().backward()
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all()
    dropped.eval()
    torch.testing.assert_close(dropped(x), plain(x), rtol=0, atol=0)


def test_full_dropout_is_inverted_dropout_on_the_weights():
    """Each weight kept with probability 1 - p and scaled by 1 / (1 - p): with V = identity
    the output rows are the dropped weights themselves."""
    module = VariantSpec("full", {"dropout": 0.25, "causal": False}).build(32, 4)
    q = k = torch.zeros(1, 1, 64, 8)  # uniform weights 1/64
    v = torch.eye(64)[None, None, :, :8].expand(1, 1, 64, 8)
    out = module.core(q, k, v)  # (1, 1, 64, 8): weights of keys 0..7
    kept = out[out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / 64 / 0.75))
    assert (out == 0).any() and kept.numel() > 0


def peak_and_largest(label: str, scope: str = "attention", fake: bool = True):
    point = Point(label, "plain" if scope == "model" else "none", scope,
                  Shape(batch=2, seq_len=128, d_model=32, heads=4, layers=1))
    acc = account(point, fake=fake)
    return acc.peak_bytes, acc.largest_at_peak


@pytest.mark.parametrize("name", ["full", "talking_heads"])
def test_the_dropout_mask_is_counted(name):
    """CPU dropout (aten dropout: bernoulli noise of the weights' shape and dtype, scaled,
    multiplied in): one more (B, h, n, n) tensor is saved for backward than without."""
    base, _ = peak_and_largest(name)
    dropped, largest = peak_and_largest(f"{name}[dropout=0.1]")
    scores = 2 * 4 * 128 * 128 * 4  # B h n n fp32
    assert dropped - base >= scores
    assert any(t["bytes"] == scores for t in largest)
    assert peak_and_largest(f"{name}[dropout=0.1]", fake=False)[0] == dropped  # real = fake, random or not


def test_sdpa_dropout_is_counted_as_torch_runs_it():
    """On CPU SDPA with dropout_p runs its math path (the flash kernel takes no dropout):
    traced, so the peak jumps to the quadratic one; without dropout it stays linear."""
    base, _ = peak_and_largest("sdpa")
    dropped, _ = peak_and_largest("sdpa[dropout=0.1]")
    assert dropped > base + 2 * 4 * 128 * 128 * 4
