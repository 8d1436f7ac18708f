"""The only door from a report to the variant registry: attnprof's own built-in variants.

A run folder is data. Its variant labels must never run code, so a report resolves a
label (its expected exponents, a prediction for the capacity chart) only when the label
names a built-in variant. ``package.module:Class`` labels, entry-point plug-ins and
unknown names are never imported: their rows render from the run's own records.

Which names are built in comes from the one list the CLI, the registry and a sweep's parent
share (``scenarios/variants/catalog.is_builtin_label``, read from the variant files without
importing torch). A label is parsed at most once per process (``builtin_spec``): the
scaling table and the capacity chart of every series of that label share the parse.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional


def is_builtin(label) -> bool:
    """True when ``label`` (options aside) names a built-in variant: safe to resolve."""
    from attnprof.scenarios.variants.catalog import is_builtin_label

    return is_builtin_label(label)


def builtin_spec(label):
    """The parsed ``VariantSpec`` of a built-in label; None for anything else (a plug-in,
    an unknown name, options the variant refuses). Never imports code a label names."""
    if not is_builtin(label):
        return None
    return _parsed(label)


@lru_cache(maxsize=None)
def _parsed(label: str):
    """One parse per built-in label and process (a spec is never changed once made)."""
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
