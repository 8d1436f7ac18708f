"""attnprof's data model, in one place: the shape, the point, the statuses and the record.

variant label -> ``Point`` (what is profiled: variant spec, mode, scope, ``Shape``) ->
measurement -> ``PointRecord`` (one flat row, units in the field names) -> DataFrame.

Identity fields are derived from the dataclass fields (as ``torch.utils.benchmark``
derives a task spec's), so results, resume, reports and the gate agree on what "the
same point" means without a second list. Nothing here imports torch, nor anything of
scenarios: a point's parsed variant (``Point.spec``) is set by whoever builds it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Optional

from attnprof.errors import UserError

# --- the shape ----------------------------------------------------------------------------
DTYPES = ("float32", "float64", "bfloat16", "float16")  # names of torch dtypes
DTYPE_ALIASES = {"fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
# --- issue 24: block options ---
MLPS = ("gelu", "swiglu")  # the feed-forward: GELU MLP (Vaswani 2017; GPT-2) | SwiGLU (Shazeer 2020; Llama)
NORMS = ("layernorm", "rmsnorm")  # every norm of the stack: LayerNorm (Ba 2016) | RMSNorm (Zhang & Sennrich 2019)
MAX_LAYERS = 10_000  # 10x DeepNet's 1,000 (arXiv 2203.00555): predict composes layer by layer; 10**8 ran out of RAM


class ShapeError(UserError):
    """A shape that cannot be built."""


# --- issue 24: precision ---
AUTOCAST_DTYPES = ("", "bfloat16", "float16")  # Shape.autocast: "" = none
# --precision -> (Shape.dtype, Shape.autocast): pure dtypes, or torch.autocast over float32
PRECISIONS = {"fp32": ("float32", ""), "bf16": ("bfloat16", ""), "fp16": ("float16", ""),
              "amp-bf16": ("float32", "bfloat16"), "amp-fp16": ("float32", "float16")}


def precision_problem(precision: str, dtype: str) -> Optional[str]:
    """Why --precision ``precision`` cannot go with --dtype ``dtype`` (a canonical name), or
    None; "" means "as --dtype says". The pure choices are --dtype's own; amp-* keeps float32
    parameters."""
    if precision == "":
        return None
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
    wanted = PRECISIONS[precision][0]
    if dtype != wanted:
        what = "keeps float32 parameters" if PRECISIONS[precision][1] else f"is --dtype {wanted}"
        return f"--precision {precision} {what}; it conflicts with --dtype {dtype}"
    return None


def canonical_dtype(name: str) -> str:
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ShapeError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return name


def later(default, *, choices: tuple = (), kind: str = ""):
    """A Shape field added after the first records were written (the training-step options,
    issue 24). A record, a baseline or a cache entry written before it lacks it, and means
    its ``default`` (``IDENTITY_DEFAULTS``), which is today's behaviour. ``choices``: the
    allowed texts; ``kind``: "amount" (an int >= 0, 0 = off) or "switch" (true/false);
    neither: a positive int."""
    return field(default=default, metadata={"later": True, "choices": choices, "kind": kind})


# --- issue 24: optimizer ---
OPTIMIZERS = ("none", "sgd", "adamw")  # profiler/measure/optimizer.py builds them
OPTIMIZER_IMPLS = ("", "foreach", "fused", "forloop")  # "": torch's default on the device
KERNELS = ("", "cuda")  # Point.kernels (issue 39)


@dataclass(frozen=True)
class Shape:
    seq_len: int = 1024  # tokens per sequence (n)
    batch: int = 1  # sequences per step
    d_model: int = 256  # model width; head_dim = d_model // heads
    heads: int = 4  # attention heads (h)
    layers: int = field(default=1, metadata={"most": MAX_LAYERS})  # blocks (L); scope `attention` ignores it
    dtype: str = "float32"  # one of DTYPES
    ff_mult: int = 4  # d_ff = ff_mult * d_model (Vaswani 2017)
    ff_chunks: int = 1  # >1: feed-forward applied in sequence chunks (Reformer §3)
    # --- issue 24: block options (scenarios/stack/layers.py) ---
    mlp: str = later("gelu", choices=MLPS)  # gelu: Linear-GELU-Linear; swiglu: w2(silu(w1 x) * w3 x), no biases
    ffn_dim: int = later(0, kind="amount")  # the MLP's hidden width d_ff; 0 = ff_mult * d_model (see d_ff)
    norm: str = later("layernorm", choices=NORMS)  # the pre-norms of every block and the final norm
    # --- issue 24: precision ---
    # "": no autocast; "bfloat16" | "float16": the forward runs under torch.autocast in that
    # dtype over float32 parameters and gradients (mixed precision: --precision amp-bf16 | amp-fp16)
    autocast: str = later("", choices=AUTOCAST_DTYPES)
    # --- issue 24: optimizer ---
    optimizer: str = later("none", choices=OPTIMIZERS)  # the step after backward: none | sgd (momentum 0.9) | adamw
    optimizer_impl: str = later("", choices=OPTIMIZER_IMPLS)  # "" = what torch picks on the device
    # --- issue 24: lm (the whole language model: scenarios/stack/lm_head.py) ---
    vocab: int = later(0, kind="amount")  # >0: token embedding, LM head and fp32 cross-entropy (scope model)
    tie_embeddings: bool = later(False, kind="switch")  # the LM head's weight is the embedding's
    loss_chunks: int = later(1)  # >1: head + loss in sequence chunks, each recomputed in backward
    # --- issue 24: attention (grouped KV heads, rotary embedding) ---
    kv_heads: int = later(0, kind="amount")  # 0 = heads
    rope: bool = later(False, kind="switch")  # RoPE on q, k

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        for f in fields(self):
            problem = _field_problem(f, getattr(self, f.name))
            if problem:
                raise ShapeError(f"{f.name} {problem}")
        if self.d_model % self.heads:
            raise ShapeError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        # --- issue 24: precision ---
        if self.autocast and self.dtype != "float32":
            raise ShapeError(f"autocast {self.autocast} runs over float32 parameters, not {self.dtype}")
        # --- issue 24: attention ---
        if self.kv_heads and self.heads % self.kv_heads:
            raise ShapeError(f"kv_heads {self.kv_heads} does not divide heads {self.heads}; "
                             f"use a divisor of {self.heads} (1 = multi-query, {self.heads} = multi-head)")
        if self.rope and self.head_dim % 2:
            raise ShapeError(f"rope rotates channel pairs: head_dim {self.head_dim} must be even")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    # --- issue 24: block options ---
    @property
    def d_ff(self) -> int:
        """The feed-forward's hidden width: ``ffn_dim``, or ``ff_mult * d_model`` when it is 0.
        A SwiGLU MLP has two hidden tensors this wide (w1 x and w3 x) and three weights."""
        return self.ffn_dim or self.ff_mult * self.d_model

    @property
    def n_kv_heads(self) -> int:  # issue 24: the key/value heads the attention really has
        return self.kv_heads or self.heads

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls and attention run in: autocast's (issue 24), else ``dtype``."""
        return self.autocast or self.dtype

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def with_len(self, seq_len: int) -> "Shape":
        return replace(self, seq_len=seq_len)

    def to_dict(self) -> dict:
        return {**asdict(self), "head_dim": self.head_dim}


def _field_problem(f, value) -> Optional[str]:
    """Why one Shape field's value is refused, or None (dtype is checked by canonical_dtype)."""
    if f.name == "dtype":
        return None
    choices, kind = f.metadata.get("choices", ()), f.metadata.get("kind", "")
    if choices:
        return None if isinstance(value, str) and value in choices else (
            f"must be one of {', '.join(choices)}, got {value!r}")
    if kind == "switch":
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if kind == "amount" else 1):
        return f"must be {'an integer >= 0' if kind == 'amount' else 'a positive integer'}, got {value!r}"
    return f"must be at most {f.metadata['most']:,}, got {value:,}" if value > f.metadata.get("most", value) else None


# --- the point ----------------------------------------------------------------------------
MODES = ("plain", "checkpoint", "reversible")  # memory-saving modes of the stack (scope model)
SCOPES = ("attention", "model")  # the core alone, or the stack of blocks
NO_MODE = "none"  # the mode recorded at scope `attention`, where modes do not apply


@dataclass(frozen=True)
class Point:
    variant: str  # a variant label, e.g. "lsh[n_hashes=8]"
    mode: str  # one of MODES at scope "model"; NO_MODE at scope "attention"
    scope: str  # one of SCOPES
    shape: Shape
    forward_only: bool = False
    # The parsed variant (a scenarios.variants VariantSpec whose label is ``variant``), set
    # once by whoever builds the point from a label (scenarios/plan.py) and carried over by
    # dataclasses.replace; None for a point built by hand (scenarios.variants.spec_of then
    # parses the label). Not part of the identity (compare=False, NOT_IDENTITY), never
    # written into a record; it travels with the point when it is pickled to a worker.
    # Typed loosely: the data model imports nothing of scenarios.
    spec: Optional[object] = field(default=None, compare=False, repr=False)
    # issue 39: whose kernels a CPU trace of the point follows where they allocate differently
    # from the CPU's: "" those of the device it runs on; "cuda" CUDA's (a GPU's step predicted on
    # the CPU: profiler/measure/device_kernels.on_device). Not identity (NOT_IDENTITY): the same
    # point, traced for another device; the prediction cache keys it (predict/cache.key_of).
    kernels: str = ""

    def __post_init__(self):
        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, got {self.kernels!r}")
        if self.scope not in SCOPES:
            raise UserError(f"unknown scope {self.scope!r}; choose one of {', '.join(SCOPES)}")
        if self.scope == "attention":
            object.__setattr__(self, "mode", NO_MODE)
        elif self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        label = getattr(self.spec, "label", None)
        if self.spec is not None and label != self.variant:
            raise ValueError(f"a point of variant {self.variant!r} given the parsed variant {label!r}")

    def identity(self) -> dict:
        """The identity fields of a result record, in IDENTITY_FIELDS order, plus head_dim."""
        return {"variant": self.variant, "mode": self.mode, "scope": self.scope,
                **asdict(self.shape), "forward_only": self.forward_only, "head_dim": self.shape.head_dim}

    def key(self) -> tuple:
        """Identity of the point in results, resume, reports and the gate."""
        ident = self.identity()
        return tuple(ident[f] for f in IDENTITY_FIELDS)

    def key_text(self) -> str:
        """key() as a string: the key of the report's prediction cache."""
        return json.dumps(self.key())


def variant_family(label) -> str:
    """'lsh[n_hashes=8]' -> 'lsh': the variant's name without its options. Pure string
    work: nothing is resolved or imported (a label read from a file is data, not code)."""
    text = str(label)
    return text.split("[", 1)[0].strip() or text


# Point fields that are not identity: the parsed variant is the label's, which is identity already;
# the kernels a trace follows are the device's, not the point's.
NOT_IDENTITY = ("spec", "kernels")
# Derived from the dataclasses above: Point's own fields with the Shape expanded in place.
IDENTITY_FIELDS = tuple(
    name for f in fields(Point) if f.name not in NOT_IDENTITY
    for name in ([g.name for g in fields(Shape)] if f.name == "shape" else [f.name]))


# Identity fields added later (``later``): absent from an older record, baseline or cache
# entry, they mean this default, so today's results and .ci/baseline.json keep their keys.
IDENTITY_DEFAULTS = {f.name: f.default for f in fields(Shape) if f.metadata.get("later")}


def with_identity_defaults(record: dict) -> dict:
    """``record`` with every later identity field it lacks set to its default (a new dict)."""
    missing = {k: v for k, v in IDENTITY_DEFAULTS.items() if k not in record}
    return {**record, **missing} if missing else record


def later_label(record: dict) -> str:
    """The later identity fields that differ from their defaults, as ``name=value`` words
    (what a point's label must add so that two such points never print alike); '' if none."""
    words = []
    for name, default in IDENTITY_DEFAULTS.items():
        value = record.get(name, default)
        if value != default:
            words.append(name if value is True else f"{name}={value}")
    return " ".join(words)


def key_of_record(record: dict) -> tuple:
    """The same key as Point.key(), read back from a result record (later fields defaulted)."""
    return tuple(record.get(f, IDENTITY_DEFAULTS.get(f)) for f in IDENTITY_FIELDS)


# --- the outcome --------------------------------------------------------------------------
STATUSES = ("ok", "oom", "timeout", "crashed", "skipped", "error")


def step_time_ms(fwd_ms, bwd_ms):
    """Forward + backward time of one step; a missing backward (forward-only) counts 0,
    a missing forward makes the whole None. Works on numbers and on pandas Series."""
    if hasattr(fwd_ms, "fillna"):  # pandas: element-wise, NaN forward stays NaN
        return fwd_ms + bwd_ms.fillna(0.0)
    if fwd_ms is None:
        return None
    return fwd_ms + (bwd_ms or 0.0)


@dataclass
class PointRecord:
    # --- identity (Point.identity()) ---
    variant: str  # label, options included: "lsh[n_hashes=8]"
    mode: str  # plain | checkpoint | reversible | none (scope attention)
    scope: str  # model | attention
    seq_len: int
    batch: int
    d_model: int
    heads: int
    head_dim: int
    layers: int
    dtype: str
    ff_mult: int = 4
    ff_chunks: int = 1
    # --- issue 24: block options ---
    mlp: str = "gelu"
    ffn_dim: int = 0
    norm: str = "layernorm"
    # --- issue 24: precision ---
    autocast: str = ""  # Shape.autocast: "" | "bfloat16" | "float16"
    # --- issue 24: optimizer ---
    optimizer: str = "none"
    optimizer_impl: str = ""
    # --- issue 24: lm ---
    vocab: int = 0
    tie_embeddings: bool = False
    loss_chunks: int = 1
    # --- issue 24: attention ---
    kv_heads: int = 0  # key/value heads; 0 = heads
    rope: bool = False  # rotary position embedding on q and k
    forward_only: bool = False
    # --- outcome ---
    status: str = "ok"  # one of STATUSES
    reason: str = ""  # why, for every status but ok (and notes for ok)
    device: str = "cpu"  # cpu | cuda
    device_name: str = ""
    host: str = ""  # the machine that measured the point (the sweep's own for points it did not run)
    worker_pid: Optional[int] = None  # the process that measured it; None when no worker ran
    error_log: str = ""  # an error or oom: its full traceback, RUN/logs/NAME.log (runner/failures.py); "" if none
    # --- issue 24: attention ---
    kv_repeat: str = ""  # grouped KV heads: "enable_gqa" (SDPA's own) | "repeat" (K/V copied per head) | ""
    # --- prediction (fake tensors, CPU device) ---
    predicted_peak_bytes: Optional[int] = None
    predicted_breakdown_bytes: dict = field(default_factory=dict)  # category -> bytes at the peak
    flops_fwd: Optional[int] = None
    flops_bwd: Optional[int] = None
    # step-time MODEL on the machine that measured the point (its calibration; profiler/timemodel);
    # None when that machine could not be calibrated or its device has no model
    predicted_time_fwd_ms: Optional[float] = None
    predicted_time_bwd_ms: Optional[float] = None
    # --- issue 24: peak split --- the op whose output reached the predicted peak, and its pass
    # ("forward" | "backward" | "step"); "" when unknown (a registered tensor reached it, or an old record)
    predicted_peak_op: str = ""
    predicted_peak_pass: str = ""
    # --- memory pass ---
    measured_peak_bytes: Optional[int] = None  # CPU: exact tensor peak; GPU: allocator max allocated
    measured_by: str = ""  # "tensor-tracker" | "cuda-allocator"
    cuda_reserved_peak_bytes: Optional[int] = None
    nvml_device_peak_bytes: Optional[int] = None  # device-wide, sampled, minus nothing
    nvml_process_peak_bytes: Optional[int] = None  # this process, where NVML can tell
    nvml_baseline_bytes: Optional[int] = None  # CUDA context + torch before the point
    nvml_note: str = ""
    gpu_sdpa_backend_measured: str = ""  # CUDA: the SDPA kernel(s) torch ran (gpumeasure/sdpa_spy.py), "" if none
    cudnn_version: Optional[int] = None  # CUDA: torch.backends.cudnn.version() of the measuring process
    rss_peak_bytes: Optional[int] = None  # sampled resident set size during the memory pass
    rss_baseline_bytes: Optional[int] = None  # RSS just before the memory pass
    # --- GPU memory MODEL (attnprof predict --gpu; profiler/gpu, docs/gpu.md): predicted, never measured ---
    gpu: str = ""  # the GPU table key the model ran for, e.g. "h100-sxm"
    gpu_sdpa_backend: str = ""  # flash | efficient | cudnn | math, "" when the variant calls no SDPA
    gpu_tensor_peak_bytes: Optional[int] = None  # bytes requested from the allocator (tensors + workspaces), peak
    gpu_allocated_peak_bytes: Optional[int] = None  # simulated max_memory_allocated
    gpu_reserved_peak_bytes: Optional[int] = None  # simulated max_memory_reserved
    gpu_total_bytes: Optional[int] = None  # CUDA context + reserved: what NVML would show for the process
    gpu_fits: Optional[bool] = None  # the simulated allocator never runs out on that GPU
    gpu_note: str = ""
    gpu_time_fwd_ms: Optional[float] = None  # step-time MODEL on that GPU (profiler/timemodel): forward
    gpu_time_bwd_ms: Optional[float] = None  # backward; None for a forward-only point
    gpu_tokens_per_s: Optional[float] = None  # batch*seq_len / modelled (fwd + bwd)
    # --- timing pass ---
    warmup: int = 0
    repeats: int = 0
    time_fwd_samples_ms: list = field(default_factory=list)
    time_bwd_samples_ms: list = field(default_factory=list)
    time_fwd_ms: Optional[float] = None  # median
    time_bwd_ms: Optional[float] = None  # median
    time_fwd_iqr_ms: Optional[float] = None
    time_bwd_iqr_ms: Optional[float] = None
    tokens_per_s: Optional[float] = None  # batch*seq_len / median(fwd+bwd)
    achieved_flops_per_s: Optional[float] = None  # predicted FLOPs / median(fwd+bwd)
    # --- bookkeeping ---
    point_wall_s: Optional[float] = None  # wall time of the whole point in its worker
    # where a point's seconds went (issue 38): start (from the sweep sending the point to the worker
    # beginning it: fork or a fresh process, imports), predict, cuda_context (the worker's first CUDA
    # call), memory_pass, timing_pass; the phases a point reached
    point_phases_s: dict = field(default_factory=dict)
    finished_at: str = ""  # ISO time

    @classmethod
    def for_point(cls, point: Point, **outcome) -> "PointRecord":
        return cls(**point.identity(), **outcome)

    @classmethod
    def from_dict(cls, data: dict) -> "PointRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_row(self) -> dict:
        return asdict(self)

    @property
    def time_ms(self) -> Optional[float]:
        return step_time_ms(self.time_fwd_ms, self.time_bwd_ms)
