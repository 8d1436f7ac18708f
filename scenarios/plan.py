"""From a Scenario to the points it covers, in series order (variant x mode, then length).

Each label is parsed here, once: every point carries its parsed variant (``Point.spec``),
which the prediction, the workload and the cache key reuse."""

from __future__ import annotations

from attnprof.profiler.records import DTYPE_BYTES, IDENTITY_DEFAULTS, MODES, NO_MODE, PRECISIONS, SCOPES, Point, Shape
from attnprof.profiler.units import INT64_MAX
from attnprof.scenarios.variants.registry import VariantSpec, parse_variants, spec_of
from attnprof.scenarios.scenario import Scenario
from attnprof.errors import UserError


class PlanError(UserError):
    """A scenario whose points cannot be built; the message is one line."""


def variant_specs(scenario: Scenario) -> list[VariantSpec]:
    return parse_variants(list(scenario.variants))


def modes_of(scenario: Scenario) -> list[str]:
    if scenario.scope not in SCOPES:
        raise PlanError(f"unknown scope {scenario.scope!r}; choose one of {', '.join(SCOPES)}")
    if scenario.scope == "attention":
        return [NO_MODE]
    for mode in scenario.modes:
        if mode not in MODES:
            raise PlanError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return list(dict.fromkeys(scenario.modes)) or list(MODES)


def shape_at(scenario: Scenario, seq_len: int) -> Shape:
    if seq_len <= 0:
        raise PlanError(f"sequence length must be positive, got {seq_len}")
    shape = Shape(batch=scenario.batch_for(seq_len), seq_len=seq_len, d_model=scenario.d_model,
                  heads=scenario.heads, layers=scenario.layers, dtype=scenario.dtype, ff_chunks=scenario.ff_chunks,
                  **later_fields(scenario))
    check_addressable(shape)
    return shape


def later_fields(scenario: Scenario) -> dict:
    """The later Shape fields (records.later: the training-step options of issue 24) as the
    scenario sets them: each one the Scenario carries under its own name, and ``autocast``,
    which --precision sets beyond --dtype (amp-*: "bfloat16" | "float16"; the pure choices are
    --dtype's, and the Scenario checked that the two agree)."""
    out = {name: getattr(scenario, name) for name in IDENTITY_DEFAULTS if hasattr(scenario, name)}
    autocast = PRECISIONS[scenario.precision][1] if scenario.precision else ""
    return {**out, "autocast": autocast} if autocast else out


def check_attention_options(spec: VariantSpec, shape: Shape) -> None:
    """A variant that cannot take these attention options (LSH's shared QK and grouped KV
    heads): a one-line VariantError before any point is built."""
    spec.check_heads(shape.heads, shape.kv_heads, shape.head_dim, shape.rope)


def check_addressable(shape: Shape) -> None:
    """Refuse a shape whose largest tensors torch cannot address: the n x n scores of
    every head (full attention's, and the reference every variant is compared with),
    or the feed-forward's n x d_ff activations; a one-line PlanError, never an overflow."""
    itemsize = DTYPE_BYTES[shape.dtype]
    sizes = {"batch x heads x n^2 attention scores": shape.batch * shape.heads * shape.seq_len ** 2,
             "batch x n x d_ff feed-forward activations": shape.batch * shape.seq_len * shape.d_ff,  # swiglu: two
             # issue 24: lm. fp32 logits (4 bytes: 2 elements of the widest 2-byte dtype counted), the embedding
             "batch x n x vocab fp32 logits": 2 * shape.batch * shape.seq_len * shape.vocab,
             "vocab x d_model embedding": shape.vocab * shape.d_model}
    for what, elements in sizes.items():
        if elements * itemsize > INT64_MAX:
            raise PlanError(f"sequence length {shape.seq_len} is beyond what torch can address: {what} would be "
                            f"{elements:.3g} elements of {itemsize} bytes, over 2^63 bytes")


def series(scenario: Scenario) -> list[list[Point]]:
    """One list per (variant, mode), lengths ascending: the unit of OOM/timeout skipping."""
    lengths = scenario.lengths()
    if not lengths:
        raise PlanError(f"no sequence lengths between {scenario.min_len} and {scenario.max_len}")
    shapes = [shape_at(scenario, n) for n in lengths]
    out = []
    for spec in variant_specs(scenario):
        check_attention_options(spec, shapes[0])  # issue 24
        for mode in modes_of(scenario):
            out.append([Point(spec.label, mode, scenario.scope, s, scenario.forward_only, spec=spec) for s in shapes])
    return out


def points(scenario: Scenario) -> list[Point]:
    return [p for s in series(scenario) for p in s]


def shape_problem(point: Point) -> str | None:
    """Why this variant cannot run at this shape (e.g. LSH bucket size vs n), or None."""
    from attnprof.scenarios.variants.base import VariantError

    s = point.shape
    try:
        spec = spec_of(point)
        spec.check_shape(s.seq_len, s.heads, s.head_dim)
    except VariantError as exc:
        return str(exc)
    return None
