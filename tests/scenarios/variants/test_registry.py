"""Plug-in loading: plug-in code runs only when a variant is resolved, and any failure of
it is one line (``VariantError``), never a traceback or an exit.

A *canary* module writes a marker file when it is imported: the tests prove that
listing and parsing built-ins never import a ``module:Class`` nobody asked for, nor an
installed entry point's code, and that asking for it does.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch

from attnprof.errors import UserError
from attnprof.scenarios.variants.base import Attention, VariantError
from attnprof.scenarios.variants.registry import (ENTRY_POINT_GROUP, get_variant, parse_variant, parse_variants,
                                                  variant_names)

BUILTINS = ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed", "sliding_window"]

CANARY = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from attnprof.scenarios.variants.full import FullAttention

class Canary(FullAttention):
    description = "a canary"
'''


class Plugins:
    """Modules and entry points written under tmp_path, with names unique to one test."""

    def __init__(self, tmp_path, monkeypatch):
        self.root, self.tag = tmp_path / "site", f"t{abs(hash(str(tmp_path))) % 10**8}"
        self.root.mkdir()
        self.marker = tmp_path / "canary-was-imported"
        self.modules: list[str] = []
        self.entries: dict[str, str] = {}
        monkeypatch.syspath_prepend(str(self.root))
        self.monkeypatch = monkeypatch

    def module(self, stem: str, source: str) -> str:
        name = f"attnprof_{stem}_{self.tag}"
        (self.root / f"{name}.py").write_text(textwrap.dedent(source))
        self.modules.append(name)
        return name

    def canary(self) -> str:
        return self.module("canary", CANARY.format(marker=str(self.marker))) + ":Canary"

    def entry_point(self, stem: str, value: str) -> str:
        """Install ``value`` under the entry-point group, as a distribution's metadata would."""
        name = f"{stem}_{self.tag}"
        self.entries[name] = value
        info = self.root / f"attnprof_test_plugins_{self.tag}-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: attnprof-test-plugins-{self.tag}\nVersion: 1.0\n")
        lines = "".join(f"{k} = {v}\n" for k, v in self.entries.items())
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
        return name

    @property
    def imported(self) -> bool:
        return self.marker.exists()

    def cleanup(self) -> None:
        for name in self.modules:
            sys.modules.pop(name, None)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    p = Plugins(tmp_path, monkeypatch)
    yield p
    p.cleanup()


def one_line_error(fn) -> str:
    with pytest.raises(VariantError) as info:
        fn()
    text = str(info.value)
    assert text and "\n" not in text and isinstance(info.value, UserError)
    return text


# --- plug-in code runs only when asked for ---------------------------------------------------
def test_listing_and_parsing_builtins_never_import_a_module_path_plugin(plugins):
    label = plugins.canary()
    assert set(BUILTINS) <= set(variant_names())
    assert [s.label for s in parse_variants(["full", "lsh[n_hashes=2]"])] == ["full", "lsh[n_hashes=2]"]
    every = [s.label for s in parse_variants(None)]  # "all variants" means the registered ones
    assert set(BUILTINS) <= set(every) and label not in every
    get_variant("sdpa")
    assert not plugins.imported
    # the control: the canary does work, when it is named
    spec = parse_variant(label + "[causal=false]")
    assert plugins.imported
    assert spec.build(32, 4)(torch.randn(1, 8, 32)).shape == (1, 8, 32)


def test_listing_and_parsing_builtins_never_import_an_entry_point(plugins):
    name = plugins.entry_point("canary_ep", plugins.canary())
    names = variant_names()
    assert names[: len(BUILTINS)] == [n for n in names if n in BUILTINS]  # built-ins first
    assert name in names  # listed by name, from the package metadata alone
    assert [s.label for s in parse_variants(["full,sdpa"])] == ["full", "sdpa"]
    parse_variant("lsh[n_hashes=4]")
    assert not plugins.imported
    cls = get_variant(name)  # used: now it is imported
    assert plugins.imported and issubclass(cls, Attention)
    assert parse_variant(f"{name}[causal=false]").build(32, 4).causal is False


def test_a_broken_entry_point_does_not_break_the_builtins_and_fails_in_one_line_when_used(plugins):
    broken = plugins.module("exits", "import sys\nsys.exit(3)\n")
    name = plugins.entry_point("broken_ep", f"{broken}:Nope")
    assert set(BUILTINS) | {name} <= set(variant_names())
    assert [s.label for s in parse_variants(["sdpa", "lsh"])] == ["sdpa", "lsh"]
    text = one_line_error(lambda: get_variant(name))
    assert name in text and "SystemExit" in text
    one_line_error(lambda: parse_variants(None))  # "every variant" includes the installed ones
    one_line_error(lambda: parse_variant(name))  # and it fails again, it is not half-registered


def test_load_plugins_false_never_imports(plugins):
    label = plugins.canary()
    name = plugins.entry_point("lazy_ep", label)
    assert "not loaded" in one_line_error(lambda: parse_variant(label, load_plugins=False))
    assert "not loaded" in one_line_error(lambda: get_variant(name, load_plugins=False))
    assert not plugins.imported
    assert parse_variant("full", load_plugins=False).label == "full"  # built-ins resolve as ever
    parse_variant(label)  # imported on request; afterwards a reader may resolve it
    assert parse_variant(label, load_plugins=False).cls is get_variant(label)


# --- every way a plug-in can be wrong is one line --------------------------------------------
@pytest.mark.parametrize("path", [":Cls", "mod:", ":", ".rel:Cls", "..rel:Cls", "pkg..mod:Cls", "a b:Cls",
                                  "mod:Cls:x", "mod:1Cls", "mod:Cls."])
def test_malformed_plugin_paths_are_refused_before_any_import(path):
    assert "package.module:ClassName" in one_line_error(lambda: get_variant(path))
    one_line_error(lambda: parse_variant(path))


@pytest.mark.parametrize("source, expect", [
    ("raise ValueError('bad\\nconfig')\n", "ValueError: bad config"),
    ("import sys\nsys.exit('plug-in says bye')\n", "SystemExit: plug-in says bye"),
    ("import sys\nsys.exit(0)\n", "SystemExit"),
    ("import no_such_module_anywhere_xyz\n", "No module named 'no_such_module_anywhere_xyz'"),
    ("def (:\n", "SyntaxError"),
    ("class Other:\n    pass\n", "has no attribute 'Cls'"),
    ("def Cls():\n    pass\n", "not a class"),
    ("Cls = 3\n", "not a class"),
    ("class Cls:\n    def core(self, q, k, v):\n        return v\n", "not a subclass of attnprof Attention"),
    ("from attnprof.scenarios.variants.base import Attention\nclass Cls(Attention):\n    pass\n",
     "does not define core"),
    ("from attnprof.scenarios.variants.full import FullAttention\n"
     "class Cls(FullAttention):\n    OPTIONS = {'causal': True}\n", "OPTIONS"),
    ("from attnprof.scenarios.variants.full import FullAttention\n"
     "from attnprof.scenarios.variants.base import Option\n"
     "class Cls(FullAttention):\n    OPTIONS = {'forward': Option(int, 1, 'x')}\n", "clashes"),
    ("from attnprof.scenarios.variants.registry import register_variant\n"
     "from attnprof.scenarios.variants.full import FullAttention\n"
     "@register_variant('full')\nclass Cls(FullAttention):\n    pass\n", "already registered"),
])
def test_a_plugin_that_fails_is_one_line(plugins, source, expect):
    label = plugins.module("bad", source) + ":Cls"
    text = one_line_error(lambda: parse_variant(label))
    assert expect in text and label in text
    one_line_error(lambda: parse_variant(label))  # the second time too: nothing half-loaded stays
    assert get_variant("full").core is not Attention.core  # the registry still works


def test_a_plugins_shape_check_that_breaks_is_one_line(plugins):
    """A ZeroDivisionError in a plug-in's check_shape was a traceback out of `attnprof sweep`."""
    label = plugins.module("shape", "from attnprof.scenarios.variants.full import FullAttention\n"
                                    "class Cls(FullAttention):\n"
                                    "    @classmethod\n"
                                    "    def check_shape(cls, options, seq_len, heads, head_dim):\n"
                                    "        return 1 / 0\n") + ":Cls"
    text = one_line_error(lambda: parse_variant(label).check_shape(64, 2, 16))
    assert text == f"variant {label}: its shape check raised ZeroDivisionError: division by zero"


def test_an_unknown_name_lists_the_choices_in_one_line():
    text = one_line_error(lambda: parse_variant("nope"))
    assert "unknown variant 'nope'" in text and all(name in text for name in BUILTINS)
    one_line_error(lambda: parse_variant(""))
    one_line_error(lambda: get_variant(""))


def test_a_plugin_subclassing_a_builtin_speaks_under_its_own_label(plugins):
    label = plugins.canary()
    text = one_line_error(lambda: parse_variant(label + "[colour=red]"))
    assert text.startswith(label) and "colour" in text  # not "full has no option ..."
    assert parse_variant(label).label == label


def test_a_plugin_module_dropped_from_sys_modules_is_loaded_afresh(plugins):
    """As import itself behaves: a test (or a tool) that removes the module and rewrites
    it gets the new class, not one remembered from before (tests/profiler/gate does)."""
    source = "from attnprof.scenarios.variants.full import FullAttention\nclass Cls(FullAttention):\n    {}\n"
    label = plugins.module("fresh", source.format("description = 'first'")) + ":Cls"
    first = get_variant(label)
    assert get_variant(label) is first  # remembered while its module is loaded
    module = label.partition(":")[0]
    sys.modules.pop(module)
    (plugins.root / f"{module}.py").write_text(source.format("description = 'the second version'"))
    importlib.invalidate_caches()
    second = get_variant(label)
    assert second is not first and second.description == "the second version"


@pytest.mark.parametrize("label, expect", [
    ("lsh[n_hashes=99999999999999999999999999]", "does not fit in int64"),
    ("lsh[n_hashes=" + "9" * 5000 + "]", "is not an integer"),  # beyond Python's int-parsing limit
    ("lsh[bucket_size=-9223372036854775809]", "does not fit in int64"),
    ("lsh[n_hashes=1e3]", "is not an integer"),
])
def test_option_values_that_cannot_be_sizes_are_one_line(label, expect):
    text = one_line_error(lambda: parse_variant(label))
    assert expect in text and len(text) < 400


def test_an_option_given_twice_is_refused_not_the_last_kept():
    text = one_line_error(lambda: parse_variant("lsh[n_hashes=2, n_hashes=8]"))
    assert text == "option 'n_hashes' is given twice in 'lsh[n_hashes=2, n_hashes=8]'; give it once"


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e999", float("nan")])
def test_a_float_option_must_be_finite(raw):
    from attnprof.scenarios.variants.base import Option

    assert "finite" in one_line_error(lambda: Option(float, 1.0, "a float").coerce("alpha", raw))
    assert Option(float, 1.0, "a float").coerce("alpha", "0.5") == 0.5


def test_a_spec_looks_its_class_up_once_and_pickles_without_it(monkeypatch):
    import pickle

    from attnprof.scenarios.variants import registry

    spec = registry.parse_variant("lsh[n_hashes=2]")
    lookups = []
    lookup = registry.get_variant
    monkeypatch.setattr(registry, "get_variant", lambda name, **kw: lookups.append(name) or lookup(name, **kw))
    assert spec.cls is spec.cls is spec.cls
    assert lookups == ["lsh"]
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.cls is spec.cls and lookups == ["lsh", "lsh"]


def test_registry_lists_the_six_variants_with_papers():
    names = variant_names()
    for expected in BUILTINS:
        assert expected in names
        cls = get_variant(expected)
        assert cls.description and cls.paper and "arXiv" in cls.paper


def test_duplicate_registration_is_refused():
    from attnprof.scenarios.variants.base import Attention
    from attnprof.scenarios.variants.registry import register_variant

    with pytest.raises(ValueError, match="already registered"):
        @register_variant("full")
        class Another(Attention):
            pass


def test_module_attr_plugin_path_loads_a_users_variant(tmp_path, monkeypatch):
    (tmp_path / "my_attn.py").write_text(
        "from attnprof.scenarios.variants.full import FullAttention\n"
        "class Mine(FullAttention):\n    description = 'mine'\n    paper = 'me, arXiv 0000.00000'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = parse_variant("my_attn:Mine[causal=false]")
    assert spec.label == "my_attn:Mine[causal=false]"
    module = spec.build(32, 4)
    assert module.causal is False
    assert module(torch.randn(1, 8, 32)).shape == (1, 8, 32)
