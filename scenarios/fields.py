"""The one list of a scenario's overridable fields: what each is, its unit, its default,
its help text, and the rules its values obey.

Everything else derives from ``FIELDS``: ``Scenario``'s defaults and checks
(``scenario.py``), the ``api`` keywords that override them (``api.build_scenario``,
``predict``, ``sweep``; ``overrides``) and the command line's shared flags (``cli.py``
builds them from this table, in its order). Adding a field is one entry here plus its use.

A field's ``name`` is the Scenario attribute and the api keyword; its ``flag`` is the
command-line option (``--point-timeout`` for ``point_timeout_s``), whose parameter name is
the flag's own (``point_timeout``). ``head_dim`` is the one field that is not stored: it
sets ``d_model = heads x head_dim`` (``stored=False``). Fields of the ``MEASURE`` panel
are what a sweep measures with; ``predict`` has no use for them (``for_predict``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from attnprof.profiler.records import MAX_LAYERS, MODES

WHAT, SHAPE, LENGTHS, MEASURE = "What to profile", "Model shape", "Sequence lengths", "Measurement"
PANELS = (WHAT, SHAPE, LENGTHS, MEASURE)  # the order the help pages show them in

Labels = Union[str, Sequence[str], None]  # a list, or one comma-separated text ("sdpa,lsh[n_hashes=8]")


@dataclass(frozen=True)
class Field:
    name: str  # the Scenario attribute and the api keyword
    hint: Any  # the api keyword's type (checked by arguments.checked); None = keep the scenario's value
    unit: str  # what a value counts ("" for a name or a switch)
    default: Any  # Scenario's default (what a scenario file that leaves it out gets)
    help: str  # the flag's help text (rich markup)
    flag: str  # the command-line option
    panel: str  # the help panel it is listed in
    # the Scenario check: count (int > 0), amount (int >= 0), text, labels, lengths, switch, seconds
    kind: str = "count"
    refuse_upto: Optional[int] = None  # a flag's value at or below this is refused in flag words (api.build_scenario)
    refusal: str = ""  # ... saying "FLAG {refusal}" with {value}
    short: str = ""  # the one-letter option, if any
    metavar: str = ""
    show_default: bool = True
    stored: bool = True  # False: a setter of other fields (head_dim), not a Scenario attribute

    @property
    def param(self) -> str:
        """The command-line parameter's name: the flag's (``--seq-len`` -> ``seq_len``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def for_predict(self) -> bool:
        return self.panel != MEASURE

    def refused(self, value) -> Optional[str]:
        """The one-line reason a flag's value is refused before any scenario is built, or None."""
        if self.refuse_upto is None or value is None or (self.kind == "lengths" and not value):
            return None
        shown = min(value) if self.kind == "lengths" else value
        if shown > self.refuse_upto:
            return None
        return f"{self.flag} {self.refusal.format(value=shown)}"


_LENGTH = "must be a positive length, got {value}"

FIELDS: tuple[Field, ...] = (
    # --- what to profile -------------------------------------------------------------------------------------------
    Field("variants", Labels, "", (),  # labels, e.g. "lsh[n_hashes=4]"; empty = every registered variant
          "variant label, repeatable or a comma list; options in brackets: [green]lsh\\[n_hashes=8][/] "
          "or [green]package.module:Class[/]. Default: every variant of [bold]attnprof variants[/].",
          "--variant", WHAT, kind="labels", short="-v", metavar="LABEL", show_default=False),
    Field("modes", Labels, "", ("plain", "checkpoint", "reversible"),  # scope model only
          f"{' | '.join(MODES)}, repeatable or a comma list (scope model). Default: all.",
          "--mode", WHAT, kind="labels", short="-m", metavar="MODE", show_default=False),
    Field("scope", Optional[str], "", "model",
          "model: a stack of --layers pre-norm blocks (default); attention: the core alone (q, k, v -> out).",
          "--scope", WHAT, kind="text", show_default=False),
    # --- the model's shape -----------------------------------------------------------------------------------------
    Field("batch", Optional[int], "sequences", 1, "sequences per step", "--batch", SHAPE),
    Field("heads", Optional[int], "heads", 4, "attention heads", "--heads", SHAPE),
    Field("head_dim", Optional[int], "channels", None, "per-head width; sets d_model = heads x head-dim",
          "--head-dim", SHAPE, refuse_upto=0, refusal="must be positive, got {value}", stored=False),
    Field("d_model", Optional[int], "channels", 256, "model width", "--d-model", SHAPE),
    Field("layers", Optional[int], "blocks", 2, f"transformer blocks (at most {MAX_LAYERS:,})", "--layers", SHAPE),
    Field("dtype", Optional[str], "", "float32", "element type (default float32)", "--dtype", SHAPE, kind="text",
          show_default=False),
    Field("ff_chunks", Optional[int], "chunks", 1, "apply the feed-forward in N sequence chunks (Reformer)",
          "--ff-chunks", SHAPE),
    Field("forward_only", Optional[bool], "", False, "forward pass only, no backward", "--forward-only", SHAPE,
          kind="switch"),
    # --- issue 24: block options (scenarios/stack/layers.py) ---
    Field("mlp", Optional[str], "", "gelu",
          "feed-forward: gelu (Linear-GELU-Linear) | swiglu (w2(silu(w1 x) * w3 x), no biases; Shazeer 2020, Llama)",
          "--mlp", SHAPE, kind="text", metavar="gelu|swiglu"),
    Field("ffn_dim", Optional[int], "channels", 0,
          "the feed-forward's hidden width d_ff; 0 = 4 x d_model (for swiglu: Llama's intermediate_size)",
          "--ffn-dim", SHAPE, kind="amount", refuse_upto=-1, metavar="N",
          refusal="must be a positive width (or 0 for 4 x d_model), got {value}"),
    Field("norm", Optional[str], "", "layernorm",
          "every norm of the stack: layernorm | rmsnorm (Zhang & Sennrich 2019; torch's nn.RMSNorm)",
          "--norm", SHAPE, kind="text", metavar="layernorm|rmsnorm"),
    # --- issue 24: precision ---
    Field("precision", Optional[str], "", "",  # "" = as --dtype says; amp-*: torch.autocast over float32 parameters
          "fp32 | bf16 | fp16 (pure: the --dtype choices) | amp-bf16 | amp-fp16 (torch.autocast over float32 "
          "parameters and gradients; amp-fp16 with a GradScaler). Default: as --dtype says.",
          "--precision", SHAPE, kind="text", show_default=False),
    # --- issue 24: optimizer ---
    Field("optimizer", Optional[str], "", "none",
          "the step after backward: none | sgd (momentum 0.9) | adamw; its states count from the start",
          "--optimizer", SHAPE, kind="text"),
    Field("optimizer_impl", Optional[str], "", "",
          "foreach | fused | forloop; default: what torch.optim picks on the device", "--optimizer-impl", SHAPE,
          kind="text", show_default=False),
    # --- issue 24: lm (the whole language model: scenarios/stack/lm_head.py, scenarios/model_config.py) ---
    Field("vocab", Optional[int], "tokens", 0,  # 0: no embedding, head or loss (the stack alone, as before)
          "vocabulary size: a token embedding below the stack, an LM head and an fp32 cross-entropy loss above it "
          "(scope model); 0 = none", "--vocab", SHAPE, kind="amount", refuse_upto=-1,
          refusal="must not be negative, got {value}"),
    Field("tie_embeddings", Optional[bool], "", False, "the LM head's weight is the embedding's (needs --vocab)",
          "--tie-embeddings", SHAPE, kind="switch"),
    Field("loss_chunks", Optional[int], "chunks", 1,
          "compute the LM head and loss in N sequence chunks, each recomputed in backward (needs --vocab)",
          "--loss-chunks", SHAPE, refuse_upto=0, refusal="must be positive, got {value}"),
    Field("model_config", Optional[str], "", "",  # read by scenarios/model_config.py; sets the fields it names
          "a Hugging Face-style config.json PATH or a preset NAME (llama-2-7b, mistral-7b, tinyllama-1.1b): "
          "sets the model's shape; the flags given next to it override it", "--model-config", SHAPE, kind="text",
          metavar="NAME|PATH", show_default=False, stored=False),
    # --- issue 24: attention ---
    Field("kv_heads", Optional[int], "heads", 0,
          "key/value heads (grouped-query attention; 1 = multi-query); must divide --heads. 0 = --heads",
          "--kv-heads", SHAPE, kind="amount", refuse_upto=-1, refusal="must not be negative, got {value}"),
    Field("rope", Optional[bool], "", False, "rotary position embedding on q and k (Su et al. 2021)", "--rope",
          SHAPE, kind="switch"),
    # --- sequence lengths ------------------------------------------------------------------------------------------
    Field("seq_lens", Optional[Sequence[int]], "tokens", (),  # explicit lengths; empty = powers of two min..max
          "a sequence length, repeatable", "--seq-len", LENGTHS, kind="lengths", refuse_upto=0, refusal=_LENGTH,
          short="-n", metavar="N", show_default=False),
    Field("min_len", Optional[int], "tokens", 256, "smallest power-of-two length", "--min-len", LENGTHS,
          refuse_upto=0, refusal=_LENGTH),
    Field("max_len", Optional[int], "tokens", 4096, "largest power-of-two length; 65536 = the full range",
          "--max-len", LENGTHS, refuse_upto=0, refusal=_LENGTH),
    Field("tokens_per_batch", Optional[int], "tokens", 0,  # >0: batch = tokens_per_batch // seq_len (Reformer Fig. 5)
          "constant tokens per step: batch = N / length", "--tokens-per-batch", LENGTHS, kind="amount", refuse_upto=0,
          refusal="must be a positive number of tokens, got {value}; leave it out for a fixed --batch"),
    # --- measurement (sweep only) ----------------------------------------------------------------------------------
    Field("repeats", Optional[int], "steps", 3, "timed steps per point", "--repeats", MEASURE, refuse_upto=0,
          refusal="must be positive, got {value}"),
    Field("warmup", Optional[int], "steps", 1, "untimed warm-up steps per point", "--warmup", MEASURE,
          kind="amount", refuse_upto=-1, refusal="must not be negative, got {value}"),
    Field("point_timeout_s", Optional[float], "seconds", 300.0, "seconds before a point is killed",
          "--point-timeout", MEASURE, kind="seconds", refuse_upto=0, refusal="must be positive, got {value}"),
)

BY_NAME = {f.name: f for f in FIELDS}
STORED = tuple(f for f in FIELDS if f.stored)  # the Scenario attributes a keyword or a flag overrides


def default(name: str):
    """``Scenario``'s default for field ``name`` (its one definition, in ``FIELDS``)."""
    return BY_NAME[name].default


def names_of(kind: str) -> tuple[str, ...]:
    return tuple(f.name for f in STORED if f.kind == kind)


def flag_problem(given: dict) -> Optional[str]:
    """The first given value (api keyword -> value) refused in flag words, in the table's order."""
    for f in FIELDS:
        problem = f.refused(given.get(f.name))
        if problem:
            return problem
    return None
