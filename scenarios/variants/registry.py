"""One registry of attention variants, by name. The CLI's choices come from here.

Built-ins register with ``@register_variant``. A user's own variant needs no edit of
attnprof: name it as ``package.module:ClassName`` wherever a variant is named, or
publish it under the entry-point group ``attnprof.variants``.

Plug-in code runs only when a variant is resolved: a ``module:Class`` label is
imported when that label is parsed, an entry point when its name is. Listing the
variants (``variant_names``) reads the installed entry points' names without
importing them, so a broken plug-in never hides the built-ins; it fails, in one line,
when it is used. Any failure of plug-in code (an import that raises anything,
``SystemExit`` included; an empty or relative path; an object that is not an
``Attention`` subclass with its own ``core``) is a one-line ``VariantError``.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Type

from attnprof.scenarios.variants.base import Attention, Option, VariantError
from attnprof.scenarios.variants.catalog import (ENTRY_POINT_GROUP, LABEL, NOT_VARIANTS,  # noqa: F401
                                                builtin_modules, split_labels)

_REGISTRY: dict[str, Type[Attention]] = {}  # @register_variant: the built-ins (and self-registering plug-ins)
# Loaded plug-ins: "module:Class" label or entry-point name -> (its module's name, that module, the class).
# Valid while sys.modules still holds that module: dropping it (a test, a reload) loads afresh, as import would.
_PLUGINS: dict[str, tuple[str, object, Type[Attention]]] = {}
_builtins_loaded = False
RESERVED = ("name", "description", "paper")  # class attributes an option must not hide


def _contract_problem(cls) -> str | None:
    """Why ``cls`` cannot be an attnprof variant, or None."""
    if not isinstance(cls, type):
        return f"is {_kind(cls)}, not a class"
    try:
        is_attention = issubclass(cls, Attention)
    except Exception:  # a class whose metaclass refuses issubclass
        is_attention = False
    if not is_attention:
        return "is not a subclass of attnprof Attention (attnprof.scenarios.variants.base)"
    if getattr(cls, "core", None) is Attention.core:
        return "does not define core(q, k, v), the attention itself"
    options = getattr(cls, "OPTIONS", None)
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(o, Option) for k, o in options.items()):
        return "has OPTIONS that do not map option names to attnprof Option(...)"
    clash = [k for k in options if k in vars(Attention) or k in RESERVED]
    if clash:  # options become instance attributes; they must not hide the class's own
        return f"has an option {clash[0]!r} that clashes with an Attention attribute"
    return None


def _kind(obj) -> str:
    kind = type(obj).__name__
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def register_variant(name: str):
    """Class decorator: make a variant available by ``name``; duplicate names are refused."""

    def wrap(cls):
        if not (isinstance(cls, type) and issubclass(cls, Attention)):
            raise TypeError(f"{cls!r} is not an attnprof Attention subclass")
        clash = [k for k in cls.OPTIONS if k in vars(Attention) or k in RESERVED]
        if clash:  # options become instance attributes; they must not hide the class's own
            raise TypeError(f"variant {name!r}: option name {clash[0]!r} clashes with an Attention attribute")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"attention variant {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    for module in builtin_modules():  # importing registers them
        importlib.import_module(f"{__package__}.{module}")
    _builtins_loaded = True


def _entry_points() -> dict[str, EntryPoint]:
    """Installed plug-ins by name, read from package metadata: nothing is imported.
    A name a built-in already has, or a second distribution's copy of a name, is ignored."""
    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # unreadable metadata of some installed distribution: no plug-ins from it
        return {}
    out: dict[str, EntryPoint] = {}
    for ep in found:
        if ep.name not in out and ep.name not in _REGISTRY and ":" not in ep.name:
            out[ep.name] = ep
    return out


# --- loading plug-in code ----------------------------------------------------------------------
_PATH = re.compile(r"^(?P<module>[^:]*):(?P<attr>[^:]*)$")


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _run_plugin_code(what: str, load: Callable[[], object]) -> Type[Attention]:
    """Call ``load`` (an import), turning *anything* it raises into a one-line VariantError.

    SystemExit too: a plug-in that calls sys.exit() on import must not end attnprof
    silently. KeyboardInterrupt still interrupts."""
    try:
        obj = load()
    except (Exception, SystemExit) as exc:
        raise VariantError(f"cannot load variant {what}: {_one_line(exc)}") from None
    problem = _contract_problem(obj)
    if problem:
        raise VariantError(f"cannot load variant {what}: it {problem}; a variant subclasses attnprof Attention "
                           f"and implements core(q, k, v)")
    return obj


def _import_attr(module_name: str, attr: str):
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _remembered(key: str) -> Type[Attention] | None:
    entry = _PLUGINS.get(key)
    if entry is None:
        return None
    module_name, module, cls = entry
    return cls if sys.modules.get(module_name) is module else None


def _remember(key: str, module_name: str, cls: Type[Attention]) -> None:
    _PLUGINS[key] = (module_name, sys.modules.get(module_name), cls)


def _load_path(path: str, load: bool = True) -> Type[Attention]:
    """A ``package.module:ClassName`` label -> its class (imported once, then remembered)."""
    if (known := _remembered(path)) is not None:
        return known
    match = _PATH.match(path)
    if not match or not _dotted(match["module"]) or not _dotted(match["attr"]):
        raise VariantError(f"cannot load variant {path!r}: a plug-in is named package.module:ClassName "
                           f"(an absolute module path and a class name, neither empty)")
    module_name, attr = match["module"], match["attr"]
    if not load and module_name not in sys.modules:
        raise VariantError(f"plug-in {path!r} is not loaded: attnprof imports plug-in code only for a command "
                           f"that runs it")
    cls = _run_plugin_code(repr(path), lambda: _import_attr(module_name, attr))
    if "name" not in vars(cls):  # a subclass of a built-in would otherwise carry the built-in's name
        cls.name = path
    _remember(path, module_name, cls)
    return cls


def _load_entry_point(ep: EntryPoint, load: bool = True) -> Type[Attention]:
    if (known := _remembered(ep.name)) is not None:
        return known
    what = f"{ep.name!r} (entry point {ep.value} of group {ENTRY_POINT_GROUP})"
    if not load:
        raise VariantError(f"plug-in {what} is not loaded: attnprof imports plug-in code only for a command "
                           f"that runs it")
    cls = _run_plugin_code(what, ep.load)
    if "name" not in vars(cls):
        cls.name = ep.name
    _remember(ep.name, ep.module, cls)
    return cls


# --- lookup --------------------------------------------------------------------------------------
def variant_names() -> list[str]:
    """Registered names, built-ins first, in the order ``_load_builtins`` registers them
    (module files sorted, then order in the file) even when a module was imported first
    by hand; then the installed entry-point plug-ins, by name only (their code is not
    imported here)."""
    names = _registered()
    names += [name for name in _entry_points() if name not in names]
    return names


def builtin_variant_names() -> list[str]:
    """The names the built-in modules registered, in ``variant_names`` order, no plug-in
    (catalog.builtin_names is the same list, read without importing torch)."""
    builtin = {f"{__package__}.{m}" for m in builtin_modules()}
    return [name for name in _registered() if _REGISTRY[name].__module__ in builtin]


def _registered() -> list[str]:
    _load_builtins()
    rank = {f"{__package__}.{m}": i for i, m in enumerate(builtin_modules())}
    return sorted(_REGISTRY, key=lambda name: rank.get(_REGISTRY[name].__module__, len(rank)))  # stable


def get_variant(name: str, *, load_plugins: bool = True) -> Type[Attention]:
    """The class of a built-in name, an entry-point name or a ``module:Class`` label.

    ``load_plugins=False`` resolves plug-ins only when their code is already imported
    (for code that reads results, such as reports: a label read from a file must not
    run code)."""
    if not isinstance(name, str) or not name.strip():
        raise VariantError(f"a variant name must be a non-empty string, got {name!r}")
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return _load_path(name, load_plugins)
    if (known := _remembered(name)) is not None:
        return known
    ep = _entry_points().get(name)
    if ep is None:
        raise VariantError(f"unknown variant {name!r}; choose one of {', '.join(variant_names())}, "
                           f"or name a plug-in as package.module:ClassName")
    return _load_entry_point(ep, load_plugins)


@dataclass(frozen=True)
class VariantSpec:
    """A variant with options, e.g. ``lsh[n_hashes=8]``. ``label`` names it in every output."""

    name: str
    options: dict = field(default_factory=dict)  # coerced, only those given

    @cached_property
    def cls(self) -> Type[Attention]:
        """The variant's class, looked up once per spec (then kept; not pickled: a worker
        that unpickles the spec looks it up again, once)."""
        return get_variant(self.name)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "cls"}

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        inner = ",".join(f"{k}={_fmt(v)}" for k, v in self.options.items())
        return f"{self.name}[{inner}]"

    def build(self, d_model: int, heads: int, layer_index: int = 0, kv_heads: int = 0, rope: bool = False) -> Attention:
        """The module; ``kv_heads`` (0 = heads) and ``rope`` only when set, so a plug-in
        written before them still builds with the defaults (issue 24)."""
        extra = {k: v for k, v in (("kv_heads", kv_heads), ("rope", rope)) if v}
        return self.cls(d_model, heads, layer_index=layer_index, **extra, **self.options)

    def check_heads(self, heads: int, kv_heads: int, head_dim: int, rope: bool = False) -> None:
        """``Attention.check_heads``: grouped KV heads and RoPE at these widths (issue 24)."""
        self.cls.check_heads(heads, kv_heads, head_dim, rope)

    def kv_repeat(self, heads: int, kv_heads: int) -> str:
        """``Attention.kv_repeat``: "enable_gqa", "repeat" or "" (issue 24)."""
        return self.cls.kv_repeat(heads, kv_heads)

    def check_shape(self, seq_len: int, heads: int, head_dim: int) -> None:
        """VariantError when the variant cannot run at this shape; a plug-in's check that raises
        anything else is one too (its words in one line, never a traceback)."""
        cls = self.cls
        try:
            cls.check_shape(cls.resolve_options(self.options), seq_len, heads, head_dim)
        except VariantError:
            raise
        except Exception as exc:  # noqa: BLE001 - plug-in code
            raise VariantError(f"variant {self.label}: its shape check raised {_one_line(exc)}") from None

    def layer_period(self) -> int:
        """After how many blocks its layers repeat (``Attention.layer_period``): 2 for an
        interleaved Sparse Transformer, 1 for every other built-in."""
        cls = self.cls
        return cls.layer_period(cls.resolve_options(self.options))


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_variant(text: str, *, load_plugins: bool = True) -> VariantSpec:
    """``'lsh[n_hashes=8, bucket_size=64]'`` -> VariantSpec; errors are one line.

    ``load_plugins=False``: see ``get_variant``; a label read from a results file
    resolves only to code that is already imported."""
    match = LABEL.match(text) if isinstance(text, str) else None
    if not match:
        raise VariantError(f"cannot parse variant {text!r}; expected NAME or NAME[key=value,...]")
    name, raw = match["name"], match["opts"]
    cls = get_variant(name, load_plugins=load_plugins)
    given: dict = {}
    for item in filter(None, (part.strip() for part in (raw or "").split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise VariantError(f"option {item!r} in {text!r} is not key=value; valid options: {cls.options_help()}")
        if key.strip() in given:  # lsh[n_hashes=2,n_hashes=8] would measure only the last: refused
            raise VariantError(f"option {key.strip()!r} is given twice in {text!r}; give it once")
        given[key.strip()] = value
    coerced = cls.resolve_options(given)
    options = {key: coerced[key] for key in given}  # keep the user's order, drop defaults
    return VariantSpec(name, options)


def spec_of(point) -> VariantSpec:
    """A point's parsed variant: the one its builder set (``Point.spec``, parsed once), or,
    for a point built by hand (a test, a script), its label parsed now."""
    return point.spec if point.spec is not None else parse_variant(point.variant)


def with_spec(point):
    """``point`` carrying its parsed variant (itself when it already does)."""
    return point if point.spec is not None else replace(point, spec=parse_variant(point.variant))


def parse_variants(values: list[str] | None) -> list[VariantSpec]:
    """Repeatable, comma-separated variant flags -> specs (commas inside [...] stay)."""
    if not values:
        return [VariantSpec(n) for n in variant_names() if not getattr(get_variant(n), "hidden", False)]
    specs: list[VariantSpec] = []
    for value in values:
        for item in split_labels(value):
            spec = parse_variant(item)
            if spec.label in {s.label for s in specs}:
                continue
            specs.append(spec)
    return specs
