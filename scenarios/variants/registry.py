"""One registry of attention variants, by name. The CLI's choices come from here.

Built-ins register with ``@register_variant``. A user's own variant needs no edit of
attnprof: name it as ``package.module:ClassName`` wherever a variant is named, or
publish it under the entry-point group ``attnprof.variants``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Type

from attnprof.scenarios.variants.base import Attention, VariantError

ENTRY_POINT_GROUP = "attnprof.variants"
_REGISTRY: dict[str, Type[Attention]] = {}
_plugins_loaded = False


def register_variant(name: str):
    """Class decorator: make a variant available by ``name``; duplicate names are refused."""

    def wrap(cls):
        if not (isinstance(cls, type) and issubclass(cls, Attention)):
            raise TypeError(f"{cls!r} is not an attnprof Attention subclass")
        clash = [k for k in cls.OPTIONS if k in vars(Attention) or k in ("name", "description", "paper")]
        if clash:  # options become instance attributes; they must not hide the class's own
            raise TypeError(f"variant {name!r}: option name {clash[0]!r} clashes with an Attention attribute")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"attention variant {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


NOT_VARIANTS = ("base", "registry", "catalog")  # the package's other modules


def builtin_modules() -> list[str]:
    """The variant modules of this package, found on disk (adding a file adds a variant)."""
    import pkgutil

    import attnprof.scenarios.variants as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in NOT_VARIANTS)


def _load_builtins_and_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in builtin_modules():  # importing registers them
        importlib.import_module(f"{__package__}.{module}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plug-in must not break attnprof
            raise VariantError(f"plug-in {ep.name!r} ({ep.value}) failed to load: {exc}") from None
        if ep.name not in _REGISTRY:
            register_variant(ep.name)(cls)


def _load_path(path: str) -> Type[Attention]:
    module_name, _, attr = path.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise VariantError(f"cannot load variant {path!r}: {exc}") from None
    if not (isinstance(obj, type) and issubclass(obj, Attention)):
        raise VariantError(f"{path!r} is not a subclass of attnprof Attention")
    if not obj.name:
        obj.name = path
    return obj


def variant_names() -> list[str]:
    """Registered names, built-ins first, in registration order."""
    _load_builtins_and_plugins()
    return list(_REGISTRY)


def get_variant(name: str) -> Type[Attention]:
    _load_builtins_and_plugins()
    if ":" in name:
        return _REGISTRY.get(name) or _load_path(name)
    if name not in _REGISTRY:
        raise VariantError(f"unknown variant {name!r}; choose one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


_SPEC = re.compile(r"^\s*(?P<name>[^\[\]\s]+)\s*(?:\[(?P<opts>[^\[\]]*)\])?\s*$")


@dataclass(frozen=True)
class VariantSpec:
    """A variant with options, e.g. ``lsh[n_hashes=8]``. ``label`` names it in every output."""

    name: str
    options: dict = field(default_factory=dict)  # coerced, only those given

    @property
    def cls(self) -> Type[Attention]:
        return get_variant(self.name)

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        inner = ",".join(f"{k}={_fmt(v)}" for k, v in self.options.items())
        return f"{self.name}[{inner}]"

    def build(self, d_model: int, heads: int, layer_index: int = 0) -> Attention:
        return self.cls(d_model, heads, layer_index=layer_index, **self.options)

    def check_shape(self, seq_len: int, heads: int, head_dim: int) -> None:
        cls = self.cls
        cls.check_shape(cls.resolve_options(self.options), seq_len, heads, head_dim)


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_variant(text: str) -> VariantSpec:
    """``'lsh[n_hashes=8, bucket_size=64]'`` -> VariantSpec; errors are one line."""
    match = _SPEC.match(text)
    if not match:
        raise VariantError(f"cannot parse variant {text!r}; expected NAME or NAME[key=value,...]")
    name, raw = match["name"], match["opts"]
    cls = get_variant(name)
    given: dict = {}
    for item in filter(None, (part.strip() for part in (raw or "").split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise VariantError(f"option {item!r} in {text!r} is not key=value; valid options: {cls.options_help()}")
        given[key.strip()] = value
    coerced = cls.resolve_options(given)
    options = {key: coerced[key] for key in given}  # keep the user's order, drop defaults
    return VariantSpec(name, options)


def parse_variants(values: list[str] | None) -> list[VariantSpec]:
    """Repeatable, comma-separated variant flags -> specs (commas inside [...] stay)."""
    if not values:
        return [VariantSpec(n) for n in variant_names() if not getattr(get_variant(n), "hidden", False)]
    specs: list[VariantSpec] = []
    for value in values:
        for item in _split_top_level(value):
            spec = parse_variant(item)
            if spec.label in {s.label for s in specs}:
                continue
            specs.append(spec)
    return specs


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]
