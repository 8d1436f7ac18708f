"""The static catalog (read with ast, no torch) says exactly what the registry says, for
every built-in variant, so `attnprof variants` and --variant checks cannot drift from
the code; and it reads the constructs variants use (spreads, bases in other modules)."""

import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from attnprof.scenarios.variants import catalog, registry
from attnprof.scenarios.variants.base import VariantError


@pytest.fixture(autouse=True)
def fresh_catalog():
    catalog.variants.cache_clear()
    catalog.builtin_variants.cache_clear()
    yield
    catalog.variants.cache_clear()
    catalog.builtin_variants.cache_clear()


def test_the_catalog_equals_the_registry_for_every_builtin_variant():
    static = {v.name: v for v in catalog.builtin_variants()}
    names = registry.variant_names()  # built-ins in registration order, then plug-ins
    assert list(static) == names[:len(static)] and len(static) >= 6
    for name, info in static.items():
        cls = registry.get_variant(name)
        assert (info.description, info.paper) == (cls.description, cls.paper), name
        assert info.hidden == bool(getattr(cls, "hidden", False)), name
        assert [(o.name, o.type, o.default, o.help) for o in info.options] == \
            [(k, o.type.__name__, o.default, o.help) for k, o in cls.OPTIONS.items()], name
        assert info.options_help() == cls.options_help(), name
        assert info.source == f"{cls.__module__}:{cls.__qualname__}", name


def test_label_grammar_splits_at_top_level_commas_only():
    assert catalog.split_labels("sdpa,lsh[n_hashes=8,bucket_size=32]") == ["sdpa", "lsh[n_hashes=8,bucket_size=32]"]
    assert catalog.split_labels(" a , b[x=1,y=2],, c ") == ["a", "b[x=1,y=2]", "c"]
    assert catalog.LABEL.match("lsh[n_hashes=8]")["opts"] == "n_hashes=8"
    assert catalog.LABEL.match("lsh[n[x]]") is None and catalog.LABEL.match("a b") is None


def test_discovery_finds_every_module_that_registers_a_variant():
    names = set(registry.variant_names())  # imports what builtin_modules() found
    registered_from = {registry.get_variant(n).__module__.rsplit(".", 1)[-1] for n in names if ":" not in n}
    assert registered_from <= set(catalog.builtin_modules())
    assert "base" not in catalog.builtin_modules() and "registry" not in catalog.builtin_modules()


@pytest.mark.parametrize("label", ["nope", "lsh[n_hashes=x]", "lsh[colour=red]", "lsh[n_hashes]", "full[causal=maybe]",
                                   "sdpa[", "sparse_fixed[summary=1.5]"])
def test_a_label_the_catalog_refuses_the_registry_refuses_too(label):
    problem = catalog.label_problem(label)
    assert problem
    with pytest.raises(VariantError):
        registry.parse_variant(label)


@pytest.mark.parametrize("label", ["sdpa", "lsh[n_hashes=8, bucket_size=32]", "full[causal=false]",
                                   "sparse_fixed[stride=128,summary=16]", "sparse_strided[combine=multihead]"])
def test_a_label_the_registry_accepts_the_catalog_accepts(label):
    registry.parse_variant(label)
    assert catalog.label_problem(label) is None


def test_plugins_are_listed_by_name_without_being_loaded(monkeypatch):
    eps = [EntryPoint("myplug", "no_such_package.attention:Mine", catalog.ENTRY_POINT_GROUP),
           EntryPoint("sdpa", "shadow:Sdpa", catalog.ENTRY_POINT_GROUP)]  # a built-in name wins
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group=None: [e for e in eps if e.group == group])
    listed = {v.name: v for v in catalog.variants()}
    assert listed["myplug"].plugin and "no_such_package.attention:Mine" in listed["myplug"].description
    assert not listed["sdpa"].plugin
    assert "no_such_package" not in sys.modules
    assert catalog.label_problem("myplug[anything=1]") is None  # its options are its own business


def test_the_catalog_imports_no_torch():
    code = ("import sys; from attnprof.scenarios.variants import catalog; catalog.variants(); "
            "catalog.label_problem('lsh[n_hashes=4]'); print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


def write(folder, name, text):
    (folder / f"{name}.py").write_text(textwrap.dedent(text))


def test_the_reader_follows_bases_spreads_and_imports_in_import_order(tmp_path, monkeypatch):
    write(tmp_path, "base", '''
        class Option: ...
        class Attention(nn.Module):
            description: ClassVar[str] = ""
            paper = ""
            OPTIONS: ClassVar[dict] = {"causal": Option(bool, True, "mask " "the future")}
    ''')
    write(tmp_path, "b_child", '''
        from attnprof.scenarios.variants.z_parent import Parent as P
        from attnprof.scenarios.variants.registry import register_variant
        NOTE = "child"

        @register_variant("child")
        class Child(P):
            description = NOTE + " of parent"
            OPTIONS = {**P.OPTIONS, "k": Option(type=float, default=-0.5, help="a float", check=positive)}
    ''')
    write(tmp_path, "z_parent", '''
        from .base import Attention, Option
        from attnprof.scenarios.variants.registry import register_variant

        class _Shared(Attention):
            paper = "Someone 2020"
            OPTIONS = {**Attention.OPTIONS, "n": Option(int, None, "chosen from n")}

        @register_variant("parent")
        class Parent(_Shared):
            description = "the parent"
            hidden = True
    ''')
    monkeypatch.setattr(catalog, "PACKAGE_DIR", tmp_path)
    found = {v.name: v for v in catalog.builtin_variants()}
    # b_child imports z_parent first, as Python would, yet the registry lists by module
    # (registry._registered; sliding_window imports sparse): the catalog's order is the same.
    assert list(found) == ["child", "parent"]
    parent, child = found["parent"], found["child"]
    assert (parent.description, parent.paper, parent.hidden) == ("the parent", "Someone 2020", True)
    assert [(o.name, o.type, o.default) for o in child.options] == [("causal", "bool", True), ("n", "int", None),
                                                                     ("k", "float", -0.5)]
    assert child.options[0].help == "mask the future" and child.description == "child of parent"
    assert child.source.endswith("b_child:Child")


def test_a_construct_the_reader_cannot_evaluate_is_an_error_not_a_guess(tmp_path, monkeypatch):
    write(tmp_path, "odd", '''
        from attnprof.scenarios.variants.registry import register_variant

        @register_variant("odd")
        class Odd(Attention):
            description = make_description()
    ''')
    monkeypatch.setattr(catalog, "PACKAGE_DIR", tmp_path)
    with pytest.raises(catalog.StaticReadError, match="make_description"):
        catalog.builtin_variants()
