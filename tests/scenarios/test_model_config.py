"""--model-config (scenarios/model_config.py): a Hugging Face-style config.json, read without
transformers, sets the scenario's model fields; the flags given next to it override them;
the presets' figures are the papers'; a bad file is one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.errors import UserError
from attnprof.scenarios.fields import BY_NAME
from attnprof.scenarios.model_config import (MAX_DEPTH, MAX_FILE_BYTES, ModelConfigError, load_model_config,
                                             map_config, preset_model_names)
from attnprof.scenarios.variants.catalog import builtin_names

TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 500,
        "architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "linear", "factor": 2.0},
        "tie_word_embeddings": True, "torch_dtype": "float32", "some_future_key": [1, {"x": None}]}
runner = CliRunner()


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def needs(field: str) -> None:
    if field not in BY_NAME:
        pytest.skip(f"this build has no {field} field yet (issue 24, another option)")


# --- the mapping ---------------------------------------------------------------------------------
def test_a_tiny_config_sets_the_model_fields_and_ignores_unknown_keys(tmp_path):
    sc = api.build_scenario(model_config=str(write(tmp_path, TINY)))
    assert (sc.d_model, sc.heads, sc.layers, sc.vocab, sc.tie_embeddings, sc.dtype) == (64, 4, 3, 500, True, "float32")
    assert sc.loss_chunks == 1
    assert "model config config.json" in sc.description and "pure" in sc.description


def test_flags_given_next_to_it_override_it(tmp_path):
    path = str(write(tmp_path, TINY))
    sc = api.build_scenario(model_config=path, layers=1, vocab=300, loss_chunks=4, dtype="bf16", tie_embeddings=False)
    assert (sc.d_model, sc.layers, sc.vocab, sc.loss_chunks, sc.dtype, sc.tie_embeddings) == (
        64, 1, 300, 4, "bfloat16", False)
    assert "overridden: layers=1" in sc.description
    assert api.build_scenario(model_config=path, head_dim=32).d_model == 4 * 32  # --head-dim sets d_model
    assert api.build_scenario(model_config=path, heads=8, head_dim=4).d_model == 32


def test_tie_word_embeddings_absent_means_tied_as_in_transformers():
    config = {k: v for k, v in TINY.items() if k != "tie_word_embeddings"}
    assert map_config(config).values["tie_embeddings"] is True
    assert map_config({**config, "tie_word_embeddings": False}).values["tie_embeddings"] is False


def test_at_scope_attention_only_the_attention_fields_are_taken(tmp_path):
    sc = api.build_scenario(model_config=str(write(tmp_path, TINY)), scope="attention")
    assert (sc.d_model, sc.heads, sc.vocab, sc.layers) == (64, 4, 0, api.build_scenario().layers)
    assert "scope attention" in sc.description


@pytest.mark.parametrize("act, mlp", [("silu", "swiglu"), ("gelu", "gelu"), ("gelu_new", "gelu")])
def test_hidden_act_chooses_the_mlp(act, mlp):
    needs("mlp")
    assert map_config({**TINY, "hidden_act": act}).values["mlp"] == mlp


@pytest.mark.parametrize("key, norm", [("rms_norm_eps", "rmsnorm"), ("layer_norm_eps", "layernorm")])
def test_the_eps_key_chooses_the_norm(key, norm):
    needs("norm")
    assert map_config({**TINY, key: 1e-5}).values["norm"] == norm


def test_kv_heads_and_ffn_dim():
    needs("kv_heads")
    needs("ffn_dim")
    values = map_config({**TINY, "num_key_value_heads": 2, "intermediate_size": 172}).values
    assert values["kv_heads"] == 2 and values["ffn_dim"] == 172


def test_a_sliding_window_is_the_sliding_window_variant():
    if "sliding_window" not in builtin_names():
        pytest.skip("this build has no sliding_window variant yet (issue 24, another option)")
    assert map_config({**TINY, "sliding_window": 64}).values["variants"] == ("sliding_window[window=64]",)
    assert "variants" not in map_config({**TINY, "sliding_window": 64, "use_sliding_window": False}).values
    assert "variants" not in map_config({**TINY, "sliding_window": None}).values


def test_what_this_build_cannot_apply_is_said_never_dropped(tmp_path):
    config = {**TINY, "num_key_value_heads": 2, "intermediate_size": 172, "hidden_act": "silu",
              "rms_norm_eps": 1e-6, "sliding_window": 64}
    cfg = map_config(config)
    lacking = [f for f in ("kv_heads", "ffn_dim", "mlp", "norm") if f not in BY_NAME]
    lacking += ["sliding_window"] if "sliding_window" not in builtin_names() else []
    for name in lacking:
        assert any(f"no {name}" in words for words in cfg.not_applied), (name, cfg.not_applied)
    assert len(cfg.not_applied) == len(lacking)
    result = api.predict(model_config=str(write(tmp_path, config)), seq_lens=[32], variants="sdpa", modes="plain")
    warned = [n for n in result.notes if n.startswith("warning: --model-config")]
    assert len(warned) == (1 if lacking else 0)


# --- the presets ---------------------------------------------------------------------------------
def test_the_presets_carry_the_papers_figures():
    assert {"llama-2-7b", "mistral-7b", "tinyllama-1.1b"} <= set(preset_model_names())
    llama = load_model_config("llama-2-7b").values
    # Touvron et al. 2023 (Llama 2, arXiv 2307.09288; Llama 1 Table 2): 4096 wide, 32 heads, 32 layers, 32K vocab
    assert (llama["d_model"], llama["heads"], llama["layers"], llama["vocab"]) == (4096, 32, 32, 32000)
    assert llama["tie_embeddings"] is False and llama["dtype"] == "float16"
    mistral = map_config(json.loads((load_model_config.__globals__["MODEL_PRESETS"] / "mistral-7b.json").read_text()))
    # Jiang et al. 2023 (Mistral 7B, arXiv 2310.06825) Table 1
    assert (mistral.values["d_model"], mistral.values["heads"], mistral.values["layers"]) == (4096, 32, 32)
    raw = json.loads((load_model_config.__globals__["MODEL_PRESETS"] / "mistral-7b.json").read_text())
    assert (raw["num_key_value_heads"], raw["intermediate_size"], raw["sliding_window"]) == (8, 14336, 4096)


def test_a_preset_is_found_by_name_and_a_typo_lists_them():
    assert api.build_scenario(model_config="tinyllama-1.1b").d_model == 2048
    with pytest.raises(ModelConfigError, match="unknown model config 'llama-7b'; presets: llama-2-7b"):
        load_model_config("llama-7b")


def test_reading_a_config_imports_neither_torch_nor_transformers():
    code = ("import sys\nfrom attnprof.scenarios.model_config import load_model_config\n"
            "load_model_config('mistral-7b')\nprint('torch' in sys.modules, 'transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --- bad files: one line each --------------------------------------------------------------------
BAD = [
    ("not json", "{hidden_size: 1}", "is not valid JSON"),
    ("a list", "[1, 2]", "must hold a JSON object, got list"),
    ("a duplicate key", '{"hidden_size": 64, "hidden_size": 32}', "the key 'hidden_size' appears twice"),
    ("NaN", '{"hidden_size": NaN}', "NaN is not a number"),
    ("Infinity", '{"rms_norm_eps": Infinity}', "Infinity is not a number"),
    ("too deep", '{"a": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", "nested too deeply"),
    ("far too deep", "[" * 100000 + "]" * 100000, "nested too deeply|is longer than|valid JSON"),
    ("missing keys", {"hidden_size": 64, "num_hidden_layers": 2},
     "lacks num_attention_heads, vocab_size \\(required: "),
    ("a string size", {**TINY, "hidden_size": "64"}, 'hidden_size must be a positive integer, got "64"'),
    ("a bool size", {**TINY, "num_hidden_layers": True}, "num_hidden_layers must be a positive integer, got true"),
    ("a zero vocab", {**TINY, "vocab_size": 0}, "vocab_size must be a positive integer, got 0"),
    ("a float size", {**TINY, "num_attention_heads": 4.0}, "num_attention_heads must be a positive integer, got 4.0"),
    ("heads not dividing", {**TINY, "num_attention_heads": 5}, "not divisible by num_attention_heads 5"),
    ("kv heads not dividing", {**TINY, "num_key_value_heads": 3}, "num_key_value_heads 3 does not divide"),
    ("an unknown activation", {**TINY, "hidden_act": "relu"}, 'hidden_act "relu" is not supported; known: silu'),
    ("an unknown dtype", {**TINY, "torch_dtype": "int8"}, 'torch_dtype "int8" is not one of float32'),
    ("a string eps", {**TINY, "rms_norm_eps": "1e-5"}, "rms_norm_eps must be a positive number"),
    ("a text tie", {**TINY, "tie_word_embeddings": "yes"}, 'tie_word_embeddings must be true or false, got "yes"'),
    ("a zero window", {**TINY, "sliding_window": 0}, "sliding_window must be a positive integer, got 0"),
]


@pytest.mark.parametrize("what, content, words", BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_is_one_line(tmp_path, what, content, words):
    path = write(tmp_path, content)
    with pytest.raises(UserError, match=words) as caught:
        api.build_scenario(model_config=str(path))
    assert "\n" not in str(caught.value)


def test_files_that_are_not_configs(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**TINY, "pad": "x" * MAX_FILE_BYTES}))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"hidden_size": "\xff"}')
    for path, words in ((big, f"at most {MAX_FILE_BYTES} bytes"), (binary, "is not UTF-8 text"),
                        (tmp_path, "is not a regular file"), (tmp_path / "absent.json", "not found")):
        with pytest.raises(ModelConfigError, match=words) as caught:
            load_model_config(str(path))
        assert "\n" not in str(caught.value)
    with pytest.raises(ModelConfigError, match="NUL"):
        load_model_config("a\x00b")


def test_a_bom_and_a_link_to_a_config_are_read(tmp_path):
    """What the Hugging Face cache holds: snapshots/<rev>/config.json is a link to a blob."""
    blob = tmp_path / "blob"
    blob.write_bytes(b"\xef\xbb\xbf" + json.dumps(TINY).encode())
    link = tmp_path / "config.json"
    link.symlink_to(blob)
    assert load_model_config(str(link)).values["d_model"] == 64


# --- the command line ----------------------------------------------------------------------------
def test_predict_with_a_tiny_config_and_flags(tmp_path):
    path = write(tmp_path, {**TINY, "num_hidden_layers": 2, "vocab_size": 300})
    result = runner.invoke(app, ["predict", "--model-config", str(path), "-n", "64", "-v", "sdpa", "-m", "plain",
                                 "--loss-chunks", "2", "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [(r["d_model"], r["layers"], r["vocab"], r["tie_embeddings"], r["loss_chunks"]) for r in records] == [
        (64, 2, 300, True, 2)]
    assert records[0]["status"] == "ok" and records[0]["predicted_peak_bytes"] > 300 * 64 * 4


@pytest.mark.parametrize("args, words", [
    (["--model-config", "{path}"], "is not valid JSON"),
    (["--model-config", "no-such-model"], "unknown model config"),
    (["--vocab", "100", "--scope", "attention"], "needs scope model"),
    (["--loss-chunks", "4"], "needs a vocabulary"),
    (["--tie-embeddings"], "needs a vocabulary"),
    (["--vocab", "-1"], "--vocab must not be negative"),
    (["--vocab", "10", "--loss-chunks", "0"], "--loss-chunks must be positive"),
])
def test_bad_input_on_the_command_line_is_one_line_and_exit_2(tmp_path, args, words):
    path = write(tmp_path, "{not json")
    result = runner.invoke(app, ["predict", "-n", "64", *[a.format(path=path) for a in args]])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and words in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_mapping_to_the_other_options_fields(monkeypatch):
    """The keys that set other issue-24 options, mapped to their agreed names, whether or not
    this build has those fields yet (they are made present here)."""
    from attnprof.scenarios.variants import catalog

    for name in ("kv_heads", "ffn_dim", "mlp", "norm"):
        monkeypatch.setitem(BY_NAME, name, BY_NAME["heads"])  # present: the mapping applies it
    monkeypatch.setattr(catalog, "builtin_names", lambda: ("sdpa", "sliding_window"))
    mistral = load_model_config("mistral-7b")
    assert not mistral.not_applied
    assert {k: mistral.values[k] for k in ("kv_heads", "ffn_dim", "mlp", "norm", "variants")} == {
        "kv_heads": 8, "ffn_dim": 14336, "mlp": "swiglu", "norm": "rmsnorm", "variants": ("sliding_window[window=4096]",)}
    assert mistral.values["dtype"] == "bfloat16"
    gpt = map_config({**TINY, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5, "num_key_value_heads": 4}).values
    assert (gpt["mlp"], gpt["norm"], gpt["kv_heads"]) == ("gelu", "layernorm", 4)


def test_predict_with_a_vocabulary_and_loss_chunks():
    result = runner.invoke(app, ["predict", "--vocab", "1000", "--loss-chunks", "4", "-n", "256", "-v", "sdpa",
                                 "-m", "checkpoint", "--d-model", "64", "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["mode"] for r in records] == ["checkpoint"]
    assert all(r["status"] == "ok" and (r["vocab"], r["loss_chunks"]) == (1000, 4) for r in records)


@pytest.mark.slow
def test_the_issues_command_runs_as_written():
    """``python -m attnprof predict --vocab 1000 --loss-chunks 4 -n 256``: every variant and mode."""
    out = subprocess.run([sys.executable, "-m", "attnprof", "predict", "--vocab", "1000", "--loss-chunks", "4",
                          "-n", "256", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert len(records) >= 18 and all(r["status"] == "ok" and r["vocab"] == 1000 for r in records)
