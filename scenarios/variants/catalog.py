"""The variants' names, descriptions, papers and options, read from their source files
with ``ast``: what ``attnprof variants`` and ``--variant`` checking need, without
importing torch (2-3 s) at start-up.

It reads what the registry would register: the ``@register_variant("name")`` classes of
every module ``builtin_modules()`` finds (the registry's discovery, without its torch
import; the test checks both find the same modules), in the order an
import would register them, with ``description``, ``paper``, ``hidden`` and ``OPTIONS``
looked up through the classes' bases (``**Base.OPTIONS`` spreads included). Entry-point
plug-ins are listed by name and value, never loaded. A variant whose source this reader
cannot evaluate raises ``StaticReadError``; callers then ask the real registry.
``tests/scenarios/variants/test_catalog.py`` checks this equals the registry, variant by
variant, so the two cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

PACKAGE = "attnprof.scenarios.variants"
PACKAGE_DIR = Path(__file__).parent
NOT_VARIANTS = ("base", "registry", "catalog")  # the package's other modules
ENTRY_POINT_GROUP = "attnprof.variants"
OPTION_TYPES = {"int": int, "float": float, "bool": bool, "str": str}

# A variant label: NAME or NAME[key=value,...]; the registry's grammar (test_catalog checks they agree).
LABEL = re.compile(r"^\s*(?P<name>[^\[\]\s]+)\s*(?:\[(?P<opts>[^\[\]]*)\])?\s*$")


class StaticReadError(Exception):
    """A variant module uses a construct this reader does not evaluate (a bug to fix
    here, caught by the catalog test; callers fall back to the registry)."""


@dataclass(frozen=True)
class OptionInfo:
    name: str
    type: str  # "int", "float", "bool" or "str": Option.type.__name__
    default: Any  # None: chosen from the sequence length by the variant
    help: str


@dataclass(frozen=True)
class VariantInfo:
    name: str
    description: str
    paper: str
    options: tuple = ()  # OptionInfo, in the class's OPTIONS order
    hidden: bool = False
    source: str = ""  # "module:Class" of a built-in; the entry point's value for a plug-in
    plugin: bool = False  # an entry point: listed, not loaded, so no description/options here

    def options_help(self) -> str:
        """The same text as ``Attention.options_help()``."""
        return ", ".join(f"{o.name} ({o.type}, default {o.default})" for o in self.options)

    def option(self, name: str) -> Optional[OptionInfo]:
        return next((o for o in self.options if o.name == name), None)


def builtin_modules() -> list[str]:
    """The variant modules of this package, found on disk (adding a file adds a variant)."""
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE_DIR)]) if m.name not in NOT_VARIANTS)


def split_labels(text: str) -> list[str]:
    """'sdpa,lsh[n_hashes=8,bucket_size=32]' -> ['sdpa', 'lsh[n_hashes=8,bucket_size=32]']."""
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


@lru_cache(maxsize=None)
def builtin_variants() -> tuple:
    """The built-in variants, in the registry's registration order."""
    return tuple(_read_builtins())


@lru_cache(maxsize=None)
def variants() -> tuple:
    """Every variant the registry would hold, in its order: built-ins, then plug-ins."""
    builtins = builtin_variants()
    known = {v.name for v in builtins}
    return builtins + tuple(p for p in plugins() if p.name not in known)


def plugins() -> list[VariantInfo]:
    """Entry points of the group ``attnprof.variants``, by name and value, not loaded."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # unreadable metadata of some distribution: no plug-ins from it (as the registry)
        return []
    out: dict[str, VariantInfo] = {}
    for ep in found:
        if ep.name not in out and ":" not in ep.name:
            out[ep.name] = VariantInfo(ep.name, f"plug-in {ep.value} (entry point; loaded when used)", "",
                                       source=ep.value, plugin=True)
    return list(out.values())


def builtin_names() -> tuple:
    """THE list of built-in variants, in registration order: the names the variant files
    of this package register. The registry imports exactly these files (``builtin_modules``;
    registry.builtin_variant_names is this list, imported), ``attnprof variants`` lists
    these names, the reports resolve only these (reports/builtins.py). Read from the
    source, so listing them imports no torch; ``StaticReadError`` as ``builtin_variants``."""
    return tuple(v.name for v in builtin_variants())


def is_builtin_label(label) -> bool:
    """True when ``label`` (options aside) names a built-in variant: code attnprof ships, safe
    to run in a process that holds other points' results (a sweep's parent, a report). A
    plug-in (``module:Class``, an entry point) or an unknown name is False: its code runs in a
    point's own process only. Never imports what the label names."""
    if not isinstance(label, str) or ":" in label:
        return False
    return (label.split("[", 1)[0].strip() or label) in _builtin_name_set()


@lru_cache(maxsize=1)
def _builtin_name_set() -> frozenset:
    try:
        return frozenset(builtin_names())
    except StaticReadError:  # a construct this reader cannot evaluate (its bug, test_catalog's to catch):
        return frozenset()  # nothing counts as built in, so nothing is run where it must not be


def names() -> list[str]:
    return [v.name for v in variants()]


def find(name: str) -> Optional[VariantInfo]:
    """A variant by name; plug-in metadata (a scan of every installed package) is read
    only for a name that is not built in."""
    found = next((v for v in builtin_variants() if v.name == name), None)
    return found or next((v for v in variants() if v.name == name), None)


def label_problem(label: str) -> Optional[str]:
    """Why a variant label cannot be built, as far as the source tells (name, option names,
    option types); None when it looks fine. Option checks that run code (a positive
    stride, a power of two) and ``module:Class`` paths are left to the registry."""
    match = LABEL.match(label)
    if not match:
        return f"cannot parse variant {label!r}; expected NAME or NAME[key=value,...]"
    name, raw = match["name"], match["opts"]
    if ":" in name:
        return None
    info = find(name)
    if info is None:
        return (f"unknown variant {name!r}; choose one of {', '.join(names())}, "
                f"or name a plug-in as package.module:ClassName")
    if info.plugin:
        return None
    for item in filter(None, (part.strip() for part in (raw or "").split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            return f"option {item!r} in {label!r} is not key=value; valid options: {info.options_help()}"
        option = info.option(key)
        if option is None:
            return f"{name} has no option {key!r}; valid options: {info.options_help()}"
        if not _parses_as(option.type, value.strip()):
            return f"{name}: option {key}={value!r} is not {_A[option.type]}; valid options: {info.options_help()}"
    return None


_A = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _parses_as(kind: str, text: str) -> bool:
    if kind == "bool":
        return text.lower() in ("true", "false", "1", "0", "yes", "no")
    try:
        OPTION_TYPES[kind](text)
    except ValueError:
        return False
    return True


# --- the static reader ---------------------------------------------------------------------
@dataclass
class _Class:
    module: "_Module"
    node: ast.ClassDef

    @property
    def attrs(self) -> dict:
        out = {}
        for stmt in self.node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                out[stmt.targets[0].id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                out[stmt.target.id] = stmt.value
        return out


class _Module:
    """One parsed module: its classes, top-level constants and imports of sibling modules."""

    def __init__(self, name: str):
        self.name = name
        path = PACKAGE_DIR / f"{name}.py"
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.classes: dict[str, _Class] = {}
        self.constants: dict[str, ast.expr] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (sibling module, name there)
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = _Class(self, stmt)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self.constants[stmt.targets[0].id] = stmt.value
            elif isinstance(stmt, ast.ImportFrom) and _sibling(stmt):
                for alias in stmt.names:
                    self.imports[alias.asname or alias.name] = (_sibling(stmt), alias.name)


def _sibling(stmt: ast.ImportFrom) -> Optional[str]:
    """'attnprof.scenarios.variants.full' (or '.full') -> 'full'; None for other modules."""
    module = stmt.module or ""
    if stmt.level == 1:
        return module or None
    if stmt.level == 0 and module.startswith(PACKAGE + "."):
        return module[len(PACKAGE) + 1:]
    return None


class _Reader:
    def __init__(self):
        self.modules: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            if not (PACKAGE_DIR / f"{name}.py").exists():
                raise StaticReadError(f"no module {PACKAGE}.{name}")
            self.modules[name] = _Module(name)
        return self.modules[name]

    def resolve(self, module: _Module, node: ast.expr) -> Optional[tuple[_Module, str]]:
        """A name as the module sees it -> (defining module, name there); None if outside."""
        if not isinstance(node, ast.Name):
            return None
        name, seen = node.id, 0
        while name not in module.classes and name not in module.constants and name in module.imports:
            target, name = module.imports[name]
            module = self.module(target)
            seen += 1
            if seen > 20:
                raise StaticReadError(f"import cycle resolving {node.id}")
        if name in module.classes or name in module.constants:
            return module, name
        return None

    def lookup(self, cls: _Class, attr: str, depth: int = 0) -> Optional[tuple[_Class, ast.expr]]:
        """Class attribute through the bases, depth-first (single inheritance in practice)."""
        if depth > 20:
            raise StaticReadError(f"inheritance too deep at {cls.node.name}")
        if attr in cls.attrs:
            return cls, cls.attrs[attr]
        for base in cls.node.bases:
            found = self.resolve(cls.module, base)
            if found and found[1] in found[0].classes:
                hit = self.lookup(found[0].classes[found[1]], attr, depth + 1)
                if hit:
                    return hit
        return None

    def literal(self, module: _Module, node: ast.expr) -> Any:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.literal(module, node.left) + self.literal(module, node.right)
        if isinstance(node, ast.Name) and node.id in module.constants:
            return self.literal(module, module.constants[node.id])
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise StaticReadError(f"{module.name}: cannot evaluate {ast.unparse(node)!r} statically") from None

    def class_attr(self, cls: _Class, attr: str, default: Any) -> Any:
        hit = self.lookup(cls, attr)
        return default if hit is None else self.literal(hit[0].module, hit[1])

    def options(self, cls: _Class) -> tuple:
        hit = self.lookup(cls, "OPTIONS")
        return () if hit is None else tuple(self.options_of(hit[0].module, hit[1]))

    def options_of(self, module: _Module, node: ast.expr) -> list[OptionInfo]:
        if not isinstance(node, ast.Dict):
            raise StaticReadError(f"{module.name}: OPTIONS must be a dict literal, got {ast.unparse(node)!r}")
        out: dict[str, OptionInfo] = {}
        for key, value in zip(node.keys, node.values):
            if key is None:  # **Base.OPTIONS
                if not (isinstance(value, ast.Attribute) and value.attr == "OPTIONS"):
                    raise StaticReadError(f"{module.name}: cannot spread {ast.unparse(value)!r}")
                found = self.resolve(module, value.value)
                if not found or found[1] not in found[0].classes:
                    raise StaticReadError(f"{module.name}: unknown class in {ast.unparse(value)!r}")
                out.update((o.name, o) for o in self.options(found[0].classes[found[1]]))
            else:
                name = self.literal(module, key)
                out[name] = self.option(module, name, value)
        return list(out.values())

    def option(self, module: _Module, name: str, node: ast.expr) -> OptionInfo:
        if isinstance(node, ast.Name):  # a shared Option constant (base.DROPOUT), maybe imported
            found = self.resolve(module, node)
            if not found or found[1] not in found[0].constants:
                raise StaticReadError(f"{module.name}: option {name!r} names {node.id!r}, not a module constant")
            module, node = found[0], found[0].constants[found[1]]
        if not (isinstance(node, ast.Call) and _called(node) == "Option"):
            raise StaticReadError(f"{module.name}: option {name!r} is not Option(...)")
        given = dict(zip(("type", "default", "help", "check"), node.args))
        given.update((kw.arg, kw.value) for kw in node.keywords if kw.arg)
        kind = given.get("type")
        if not (isinstance(kind, ast.Name) and kind.id in OPTION_TYPES):
            raise StaticReadError(f"{module.name}: option {name!r} has a type other than int, float, bool, str")
        return OptionInfo(name, kind.id, self.literal(module, given["default"]), self.literal(module, given["help"]))

    def info(self, cls: _Class, name: str) -> VariantInfo:
        return VariantInfo(name=name, description=self.class_attr(cls, "description", ""),
                           paper=self.class_attr(cls, "paper", ""), options=self.options(cls),
                           hidden=bool(self.class_attr(cls, "hidden", False)),
                           source=f"{PACKAGE}.{cls.module.name}:{cls.node.name}")

    def registered(self, order: list[str]) -> list[VariantInfo]:
        """Walk modules as importing them would: a sibling import runs that module first."""
        done: set[str] = set()
        out: list[VariantInfo] = []

        def visit(name: str) -> None:
            if name in done or name in NOT_VARIANTS:
                return
            done.add(name)
            module = self.module(name)
            for stmt in module.tree.body:
                if isinstance(stmt, ast.ImportFrom) and _sibling(stmt):
                    visit(_sibling(stmt))
                elif isinstance(stmt, ast.ClassDef):
                    for label in _registered_names(stmt):
                        out.append(self.info(module.classes[stmt.name], label))

        for name in order:
            visit(name)
        # The registry lists by module, in ``order`` (registry._registered), whatever a sibling
        # import registered first (sliding_window imports sparse): the same order here.
        rank = {name: i for i, name in enumerate(order)}
        return sorted(out, key=lambda info: rank.get(info.source.split(":")[0].rsplit(".", 1)[-1], len(rank)))


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _registered_names(node: ast.ClassDef) -> list[str]:
    """``@register_variant("lsh")`` -> ['lsh'] (innermost decorator registers first)."""
    names = []
    for deco in reversed(node.decorator_list):
        if isinstance(deco, ast.Call) and _called(deco) == "register_variant":
            if len(deco.args) != 1 or not isinstance(deco.args[0], ast.Constant):
                raise StaticReadError(f"{node.name}: register_variant needs one literal name")
            names.append(deco.args[0].value)
    return names


def _read_builtins() -> list[VariantInfo]:
    out: dict[str, VariantInfo] = {}
    for info in _Reader().registered(builtin_modules()):
        if info.name in out:
            raise StaticReadError(f"attention variant {info.name!r} is registered twice")
        out[info.name] = info
    return list(out.values())
