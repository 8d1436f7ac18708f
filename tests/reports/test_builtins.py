"""The one door from a report to the variant registry (reports.builtins): only labels
that name a built-in variant are resolved; plug-ins, unknown names and refused options
are None, and no code a label names is ever imported."""

import sys

import pytest

from attnprof.reports.builtins import builtin_spec, expected_exponents, is_builtin


def test_the_builtin_names_are_one_list_for_the_catalog_the_registry_and_the_reports():
    from attnprof.scenarios.variants import catalog, registry

    assert list(catalog.builtin_names()) == registry.builtin_variant_names()
    assert all(is_builtin(name) for name in catalog.builtin_names())


@pytest.mark.parametrize("label, builtin", [("full", True), ("lsh[n_hashes=2]", True), ("sparse_fixed", True),
                                            ("sliding_window[window=64]", True),
                                            ("canary_mod:Evil", False), ("full:Evil", False), ("no_such_variant", False),
                                            ("", False), (None, False), (3, False)])
def test_only_labels_naming_a_builtin_variant_are_builtin(label, builtin):
    assert is_builtin(label) is builtin


def test_a_builtin_spec_is_parsed_once_and_anything_else_is_none():
    spec = builtin_spec("lsh[n_hashes=2]")
    assert spec is not None and spec.label == "lsh[n_hashes=2]"
    assert builtin_spec("lsh[n_hashes=2]") is spec
    assert builtin_spec("lsh[no_such_option=1]") is None  # options the variant refuses: no error, no spec
    assert builtin_spec("no_such_variant") is None


def test_a_module_path_label_is_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "builtins_canary.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n"
                                                 "from attnprof.scenarios.variants.full import FullAttention\n"
                                                 "class Evil(FullAttention):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for label in ("builtins_canary:Evil", "builtins_canary:Evil[causal=false]"):
        assert builtin_spec(label) is None and expected_exponents(label) is None
    assert not marker.exists() and "builtins_canary" not in sys.modules


def test_expected_exponents_are_the_builtin_classes_complexity():
    assert expected_exponents("full") == (2.0, 2.0)
    assert expected_exponents("full") == tuple(builtin_spec("full").cls.complexity)
    assert expected_exponents("<script>") is None
