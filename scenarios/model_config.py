"""A real model's shape from a Hugging Face-style ``config.json``, without transformers.

``--model-config FILE.json`` (api keyword ``model_config``) or a preset NAME
(``presets/models/NAME.json``: llama-2-7b, mistral-7b, tinyllama-1.1b; where each figure
comes from: ``presets/models/README.md``) sets the scenario fields below; flags given
next to it override them (``api.build_scenario``).

    hidden_size -> d_model            num_attention_heads -> heads
    num_key_value_heads -> kv_heads   intermediate_size -> ffn_dim
    num_hidden_layers -> layers       vocab_size -> vocab
    hidden_act: silu -> mlp swiglu (Llama's gated MLP), gelu / gelu_new -> mlp gelu
    rms_norm_eps -> norm rmsnorm;  layer_norm_eps -> norm layernorm
    tie_word_embeddings -> tie_embeddings (absent: true, transformers' PretrainedConfig default)
    sliding_window W (not null, and use_sliding_window not false) -> variant sliding_window[window=W]
    torch_dtype -> dtype, a PURE dtype (every tensor in it; not autocast: --precision says that)

The fields kv_heads, ffn_dim, mlp, norm and the sliding_window variant come with other
options of issue 24; where this build lacks one, the key is not applied and the
scenario's description says so (never silently). Unknown keys are ignored; a missing
required key is one line naming every one missing.

The file is untrusted data: a regular file of at most ``MAX_FILE_BYTES``, UTF-8 JSON, an
object at the top, nested at most ``MAX_DEPTH`` deep, no duplicate keys, no NaN or
Infinity, every value read type-checked. Every problem is a one-line ``ModelConfigError``
(exit 2), never a traceback. Imports no torch.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from attnprof.errors import UserError
from attnprof.scenarios.fields import BY_NAME

MODEL_PRESETS = Path(__file__).parent / "presets" / "models"
MAX_FILE_BYTES = 1 << 20  # a config.json is a few hundred bytes; anything bigger is the wrong file
MAX_DEPTH = 16  # nesting of objects and arrays (real configs: 2-3, e.g. rope_scaling, text_config)
REQUIRED = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
MLP_OF_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "gelu", "gelu_new": "gelu"}
DTYPE_OF = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}
NOT_APPLIED = "NOT applied: "  # how the description says what a config set that this build has no field for
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ModelConfigError(UserError):
    """A model config that cannot be read; the message is one line."""


@dataclass
class ModelConfig:
    """What a config sets: ``values`` (Scenario field -> value), and what it could not apply."""

    name: str  # the file's stem
    values: dict = field(default_factory=dict)
    not_applied: list = field(default_factory=list)  # "num_key_value_heads=8 (this build has no kv_heads)"
    notes: list = field(default_factory=list)  # said in the scenario's description

    def __bool__(self) -> bool:
        return bool(self.name)  # ModelConfig(""): no config given

    def description(self) -> str:
        words = [f"model config {self.name}"] + self.notes
        if self.not_applied:
            words.append(NOT_APPLIED + ", ".join(self.not_applied))
        return "; ".join(words)


def preset_model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_PRESETS.glob("*.json"))


def resolve(name_or_path) -> Path:
    """The file a --model-config value names: a preset by name, else a path."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ModelConfigError(f"a model config is a preset name or a JSON file path, got {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    if isinstance(text, bytes) or not text.strip():
        raise ModelConfigError(f"empty model config name; presets: {', '.join(preset_model_names())}")
    if "\x00" in text:
        raise ModelConfigError("model config path contains a NUL character")
    path = Path(text)
    shown = _shown_name(text)
    try:
        if not path.exists() and _NAME.match(text) and path.suffix != ".json":  # "tinyllama-1.1b": a name
            preset = MODEL_PRESETS / f"{text}.json"
            if preset.is_file():
                return preset
            raise ModelConfigError(f"unknown model config {shown}; presets: {', '.join(preset_model_names())}")
        if not path.exists():
            raise ModelConfigError(f"model config file not found: {shown}")
        if not path.is_file():
            raise ModelConfigError(f"model config {shown} is not a regular file")
    except OSError as exc:
        raise ModelConfigError(f"cannot read model config {shown}: {exc.strerror or exc}") from None
    return path


def read_json(path: Path) -> dict:
    """The file's top-level object, bounded and checked (see the module docstring)."""
    name = _shown_name(path.name)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ModelConfigError(f"model config {name} is {size} bytes; a config.json is short "
                                   f"(at most {MAX_FILE_BYTES} bytes)")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            raw = os.read(fd, MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ModelConfigError(f"cannot read model config {name}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ModelConfigError(f"model config {name} is longer than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"model config {name} is not UTF-8 text "
                               f"(byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise ModelConfigError(f"model config {name} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # json.JSONDecodeError, and the hooks' refusals
        raise ModelConfigError(f"model config {name} is not valid JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"model config {name} must hold a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_DEPTH:
        raise ModelConfigError(f"model config {name} is nested too deeply (at most {MAX_DEPTH} levels)")
    return data


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise ValueError(f"the key {_shown_name(dup)} appears twice")
    return dict(pairs)


def _no_constant(word: str):
    raise ValueError(f"{word} is not a number")


def _depth(value) -> int:
    """Nesting depth of objects and arrays, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _shown_name(text) -> str:
    shown = repr(str(text))
    return shown if len(shown) <= 80 else shown[:77] + "..."


# --- the mapping ---------------------------------------------------------------------------
def load_model_config(name_or_path) -> ModelConfig:
    """Read a config.json (or a preset) into the Scenario fields it sets."""
    path = resolve(name_or_path)
    data = read_json(path)
    return map_config(data, path.name)


def map_config(data: dict, name: str = "config") -> ModelConfig:
    shown = _shown_name(name)
    missing = [k for k in REQUIRED if data.get(k) is None]
    if missing:
        raise ModelConfigError(f"model config {shown} lacks {', '.join(missing)} (required: {', '.join(REQUIRED)})")

    def positive(key: str) -> int:
        value = data[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ModelConfigError(f"model config {shown}: {key} must be a positive integer, got {_value(value)}")
        return value

    def flag(key: str, default: bool) -> bool:
        value = data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ModelConfigError(f"model config {shown}: {key} must be true or false, got {_value(value)}")
        return value

    cfg = ModelConfig(name)
    out = cfg.values

    def put(field_name: str, value, key: str) -> None:
        """Set a scenario field, or say the key was not applied when this build lacks the field."""
        if field_name in BY_NAME:
            out[field_name] = value
        else:
            cfg.not_applied.append(f"{key}={_value(data[key])} (this build has no {field_name})")

    out["d_model"] = positive("hidden_size")
    out["heads"] = positive("num_attention_heads")
    out["layers"] = positive("num_hidden_layers")
    out["vocab"] = positive("vocab_size")
    if out["d_model"] % out["heads"]:
        raise ModelConfigError(f"model config {shown}: hidden_size {out['d_model']} is not divisible by "
                               f"num_attention_heads {out['heads']}")
    if data.get("num_key_value_heads") is not None:
        kv = positive("num_key_value_heads")
        if out["heads"] % kv:
            raise ModelConfigError(f"model config {shown}: num_key_value_heads {kv} does not divide "
                                   f"num_attention_heads {out['heads']}")
        if kv != out["heads"] or "kv_heads" in BY_NAME:
            put("kv_heads", kv, "num_key_value_heads")
    if data.get("intermediate_size") is not None:
        put("ffn_dim", positive("intermediate_size"), "intermediate_size")
    if data.get("hidden_act") is not None:
        act = data["hidden_act"]
        if not isinstance(act, str) or act not in MLP_OF_ACT:
            raise ModelConfigError(f"model config {shown}: hidden_act {_value(act)} is not supported; "
                                   f"known: {', '.join(MLP_OF_ACT)}")
        if MLP_OF_ACT[act] != "gelu" or "mlp" in BY_NAME:
            put("mlp", MLP_OF_ACT[act], "hidden_act")
    norm = _norm(data, shown)
    if norm is not None and (norm[0] != "layernorm" or "norm" in BY_NAME):
        put("norm", norm[0], norm[1])
    out["tie_embeddings"] = flag("tie_word_embeddings", True)
    window = data.get("sliding_window")
    if window is not None and flag("use_sliding_window", True):
        put_window(cfg, positive("sliding_window"))
    dtype_key = "torch_dtype" if data.get("torch_dtype") is not None else "dtype"
    dtype = data.get(dtype_key)
    if dtype is not None and dtype != "auto":
        if not isinstance(dtype, str) or dtype not in DTYPE_OF:
            raise ModelConfigError(f"model config {shown}: {dtype_key} {_value(dtype)} is not one of "
                                   f"{', '.join(DTYPE_OF)}")
        out["dtype"] = DTYPE_OF[dtype]
        cfg.notes.append(f"dtype {dtype} from {dtype_key}, pure (not autocast)")
    return cfg


def _norm(data: dict, shown: str):
    """("rmsnorm" | "layernorm", the key that says so), or None."""
    for key, norm in (("rms_norm_eps", "rmsnorm"), ("layer_norm_eps", "layernorm"), ("layer_norm_epsilon", "layernorm")):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not (math.isfinite(value) and value > 0):
            raise ModelConfigError(f"model config {shown}: {key} must be a positive number, got {_value(value)}")
        return norm, key
    return None


def put_window(cfg: ModelConfig, window: int) -> None:
    """The sliding_window variant, when this build has it (catalog: no torch import)."""
    from attnprof.scenarios.variants.catalog import builtin_names

    if "sliding_window" in builtin_names():
        cfg.values["variants"] = (f"sliding_window[window={window}]",)
    else:
        cfg.not_applied.append(f"sliding_window={window} (this build has no sliding_window variant)")


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
