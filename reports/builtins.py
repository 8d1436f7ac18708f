"""The only door from a report to the variant registry: attnprof's own built-in variants.

A run folder is data. Its variant labels must never run code, so a report resolves a
label (its expected exponents, a prediction for the capacity chart) only when the label
names a built-in variant. ``package.module:Class`` labels, entry-point plug-ins and
unknown names are never imported: their rows render from the run's own records.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Optional

from attnprof.profiler.records import variant_family

_PACKAGE = "attnprof.scenarios.variants"


@lru_cache(maxsize=1)
def builtin_names() -> frozenset:
    """Names the built-in variant modules register (found on disk, as the registry finds them)."""
    from attnprof.scenarios.variants.base import Attention
    from attnprof.scenarios.variants.registry import builtin_modules

    names = set()
    for module_name in builtin_modules():
        module = importlib.import_module(f"{_PACKAGE}.{module_name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Attention) and obj.__module__ == module.__name__
                    and isinstance(getattr(obj, "name", None), str) and obj.name):
                names.add(obj.name)
    return frozenset(names)


def is_builtin(label) -> bool:
    """True when ``label`` (options aside) names a built-in variant: safe to resolve."""
    return isinstance(label, str) and ":" not in label and variant_family(label) in builtin_names()


def builtin_spec(label):
    """The parsed ``VariantSpec`` of a built-in label; None for anything else (a plug-in,
    an unknown name, options the variant refuses). Never imports code a label names."""
    if not is_builtin(label):
        return None
    from attnprof.scenarios.variants.base import VariantError
    from attnprof.scenarios.variants.registry import parse_variant

    try:
        return parse_variant(label)
    except VariantError:
        return None


def expected_exponents(label) -> Optional[tuple]:
    """A built-in variant's (memory, time) complexity exponents; None for any other label."""
    spec = builtin_spec(label)
    return tuple(spec.cls.complexity) if spec is not None else None
