"""A scenario from keywords: ``build_scenario``, and the keywords themselves.

The keywords that override a scenario's fields are not written out per function: each
comes from ``scenarios/fields.py`` (FIELDS), and ``overridable`` adds them to a
function's signature (type hints included, so ``arguments.checked`` checks them, and
``help()`` shows them) in place of its ``**overrides``. A field added there is a keyword
of ``build_scenario``, ``predict`` and ``sweep`` at once.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from attnprof.arguments import UsageProblem, checked, refuse_ignored
from attnprof.profiler.records import PRECISIONS, canonical_dtype, precision_problem
from attnprof.profiler.units import parse_bytes
from attnprof.scenarios.fields import FIELDS, STORED, Field, flag_problem
from attnprof.scenarios.scenario import Scenario, load_scenario

PathLike = Union[str, Path]
Log = Callable[[str], None]


def quiet(_: str) -> None:
    """The default ``log``: say nothing."""


def overridable(fields: Sequence[Field] = FIELDS) -> Callable:
    """A decorator: ``fn(..., **overrides)`` with one keyword-only parameter per field
    (default None: keep the scenario's value) in place of ``**overrides``, annotated with
    the field's hint. The function still receives them in ``overrides``, given ones only."""

    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = next((i for i, p in enumerate(own) if p.kind is inspect.Parameter.KEYWORD_ONLY), len(own))
        added = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=f.hint)
                 for f in fields]
        fn.__signature__ = signature.replace(parameters=[*own[:at], *added, *own[at:]])
        fn.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != "overrides"},
                              **{f.name: f.hint for f in fields}}
        return fn

    return wrap


@checked
@overridable()
def build_scenario(scenario: Union[PathLike, Scenario, None] = None, *, base: Optional[Scenario] = None,
                   **overrides) -> Scenario:
    """Keywords over a scenario (a built-in NAME, a TOML path or a ``Scenario``) over
    ``base`` (default ``Scenario()``) -> one validated Scenario.

    ``variants`` and ``modes`` take lists or comma-separated text (``"sdpa,lsh[n_hashes=8]"``);
    ``head_dim`` sets ``d_model = heads * head_dim``. Every variant must run at one of the
    lengths at least (its other points are skipped with the reason); the variants'
    options and the shape are checked here, so a sweep never starts on a typo.
    The keywords, their units and defaults: ``attnprof.scenarios.fields.FIELDS``.
    """
    sc = scenario if isinstance(scenario, Scenario) else (
        load_scenario(str(scenario)) if scenario else (base or Scenario()))
    given = {f.name: overrides.get(f.name) for f in FIELDS}
    if given["head_dim"] is not None and given["d_model"] is not None:
        raise UsageProblem("give --head-dim or --d-model, not both")
    problem = flag_problem(given)
    if problem:
        raise UsageProblem(problem)
    if given["head_dim"] is not None:
        given["d_model"] = given["head_dim"] * (given["heads"] if given["heads"] is not None else sc.heads)
    if given["dtype"] is not None:
        given["dtype"] = canonical_dtype(given["dtype"])
    _precision(given)  # --- issue 24: precision ---
    refuse_ignored(sc, **given)
    from_config = _with_model_config(given, sc)  # issue 24: lm. Its fields, under the flags given
    seq_lens = given["seq_lens"]
    given["seq_lens"] = tuple(seq_lens) if seq_lens else (() if (given["min_len"] or given["max_len"]) else None)
    given["variants"], given["modes"] = listed(given["variants"]), listed(given["modes"])
    stored = {f.name: given[f.name] for f in STORED}
    changed = {k: v for k, v in stored.items() if v is not None and v != getattr(sc, k) and k not in from_config.values}
    sc = sc.override(**stored)
    if from_config:
        sc = sc.override(description=f"{from_config.description()}; {sc.description}".strip("; "))
    if changed:  # the file's description no longer tells the whole story
        told = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in changed.items())
        sc = sc.override(description=f"{sc.description} [overridden: {told}]".strip())
    if sc.min_len > sc.max_len and not sc.seq_lens:
        origin = f"scenario {sc.name}'s" if scenario else "the default"  # a flag not given is named as such
        said = [f"--{flag} {value}" if given[name] is not None else f"{origin} {name} {value}"
                for flag, name, value in (("min-len", "min_len", sc.min_len), ("max-len", "max_len", sc.max_len))]
        hint = "" if all(given[n] is not None for n in ("min_len", "max_len")) else (
            f": give --{'min' if given['min_len'] is None else 'max'}-len too")
        raise UsageProblem(f"{said[0]} is above {said[1]}{hint}")
    if given["variants"] is None:  # issue 24: the scenario's own list, not the caller's
        sc = _leave_out_inapplicable(sc)
    _check_points(sc)
    return sc


# --- issue 24: attention options a listed variant cannot take ---
LEFT_OUT = "left out: "  # how the description says which of its variants a scenario could not run


def _leave_out_inapplicable(sc: Scenario) -> Scenario:
    """The scenario's variants (its file's list, or the built-ins), less those that cannot take
    its attention options (LSH's shared QK and grouped KV heads: ``Attention.check_heads``),
    each said in the description. Variants the caller named are never left out: those are
    refused in one line (plan.check_attention_options), as is a scenario with none left."""
    from attnprof.scenarios.plan import variant_specs
    from attnprof.scenarios.variants.base import VariantError

    if not sc.heads or not isinstance(sc.d_model, int) or sc.d_model % sc.heads:
        return sc  # the shape's own checks say what is wrong
    kept, reasons = [], []
    for spec in variant_specs(sc):  # an empty list is every built-in
        try:
            spec.check_heads(sc.heads, sc.kv_heads, sc.d_model // sc.heads, sc.rope)
        except VariantError as exc:
            reasons.append(f"{spec.label} ({str(exc).splitlines()[0]})")
        else:
            kept.append(spec.label)
    if not reasons or not kept:
        return sc
    return sc.override(variants=tuple(kept), description=f"{sc.description}; {LEFT_OUT}{'; '.join(reasons)}".strip("; "))


# --- issue 24: precision ---
def _precision(given: dict) -> None:
    """--precision and --dtype, in ``given`` (in place): a pure --precision is its --dtype; an
    amp-* one keeps float32 parameters; both given and not agreeing is one line. --dtype alone
    says the precision (a scenario's precision is reset to "", "as --dtype says")."""
    precision, dtype = given["precision"], given["dtype"]
    if precision is None:
        if dtype is not None:
            given["precision"] = ""
        return
    problem = precision_problem(precision, dtype if dtype is not None else PRECISIONS.get(precision, ("",))[0])
    if problem:
        raise UsageProblem(problem)
    if precision:
        given["dtype"] = PRECISIONS[precision][0]
# --- issue 24: lm ---
ATTENTION_SCOPE_FIELDS = ("d_model", "heads", "kv_heads", "dtype", "variants")  # what a config sets at scope attention


def _with_model_config(given: dict, sc: Scenario):
    """Fill ``given`` (field -> value, None = not given) from ``--model-config``'s file where
    no flag was given; the ModelConfig, whose ``values`` keys are the fields it set (falsy
    when there is none). At scope attention only the attention's own fields are taken."""
    from attnprof.scenarios.model_config import ModelConfig, load_model_config

    if not given.get("model_config"):
        return ModelConfig("")
    config = load_model_config(given["model_config"])
    attention = (given["scope"] if given["scope"] is not None else sc.scope) == "attention"
    taken = {}
    for key, value in config.values.items():
        if attention and key not in ATTENTION_SCOPE_FIELDS:
            continue
        if key == "d_model" and given["head_dim"] is not None:
            continue  # --head-dim sets d_model
        if given.get(key) is None:
            given[key] = taken[key] = value
    if attention:
        config.notes.append("scope attention: its attention fields only")
    config.values = taken
    return config


def scenario_warnings(sc: Scenario) -> list:
    """The warnings a built scenario carries in its description: a model-config key this
    build could not apply; variants left out because they cannot take its attention options."""
    from attnprof.scenarios.model_config import NOT_APPLIED

    parts = sc.description.split("; ")
    said = [f"warning: --model-config: {part.split(' [overridden:')[0]}" for part in parts if part.startswith(NOT_APPLIED)]
    for at, part in enumerate(parts):
        if part.startswith(LEFT_OUT):  # the last part (added after every other), its reasons joined by "; "
            said.append(f"note: {'; '.join(parts[at:])}")
            break
    return said


def listed(values: Union[str, Sequence[str], None]) -> Optional[tuple]:
    """'a,b' or ['a', 'b,c'] -> a tuple of labels (commas inside [...] stay); None stays None."""
    if values is None:
        return None
    from attnprof.scenarios.variants.catalog import split_labels

    items = [values] if isinstance(values, str) else list(values)
    return tuple(label for item in items for label in split_labels(item)) or None


def _check_points(sc: Scenario) -> None:
    """The shape, the modes and every variant's options, through the real registry."""
    from attnprof.scenarios.plan import modes_of, shape_at, variant_specs
    from attnprof.scenarios.variants.base import VariantError

    shape_at(sc, sc.lengths()[0] if sc.lengths() else 1)  # validates d_model/heads/dtype
    modes_of(sc)
    for spec in variant_specs(sc):
        problems = []
        for n in sc.lengths():
            try:
                spec.check_shape(n, sc.heads, sc.d_model // sc.heads)
                break
            except VariantError as exc:
                problems.append(str(exc))
        else:
            if problems:
                raise VariantError(problems[-1])


def to_bytes(text: Union[str, int], flag: str) -> int:
    """A size ('80GiB' or bytes) given as ``flag``; a one-line UsageProblem naming it."""
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise UsageProblem(f"{flag}: {exc}") from None
