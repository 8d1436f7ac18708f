"""The GPU table: built-in data, user files, one-line errors naming the field, `attnprof gpus`."""

import json
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from attnprof.cli import app
from attnprof.errors import UserError
from attnprof.profiler.hardware.gpus import (ENV_VAR, GpuTableError, UnknownGpu, get_gpu, load_gpus, read_table,
                                         resolve_gpus)
from gpu_samples import MY_CARD_TOML

runner = CliRunner()
REQUIRED_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "l40s", "rtx4090")
GOOD = MY_CARD_TOML


@pytest.fixture(autouse=True)
def no_user_table(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_the_builtin_table_has_the_required_gpus_with_every_field():
    table = load_gpus()
    assert set(REQUIRED_GPUS) <= set(table)
    for key in REQUIRED_GPUS:
        g = table[key]
        assert g.memory_bytes > 20 * 2**30 and g.bandwidth_bytes_per_s > 1e11 and g.sm_count > 0
        assert {"fp32", "tf32", "bf16", "fp16"} <= set(g.tflops) and "http" in g.source
        assert g.tflops["bf16"] > g.tflops["tf32"] >= g.tflops["fp32"] / 2
    # spot checks against the datasheets (dense figures, not "with sparsity")
    assert table["h100-sxm"].tflops["bf16"] == 989.4 and table["h100-sxm"].compute_capability == (9, 0)
    assert table["a100-80gb"].tflops["bf16"] == 312.0 and table["a100-80gb"].bandwidth_bytes_per_s == 2.039e12
    assert table["a100-40gb"].memory_bytes == 40960 << 20 and table["h200"].memory_bytes == 143771 << 20
    assert "fp64" in table["h100-sxm"].tflops and "fp64" not in table["l4"].tflops
    assert table["l4"].compute_capability == (8, 9) and table["rtx4090"].tflops["fp16"] == 165.2


def test_a_user_file_adds_and_replaces_gpus_through_the_env_var_or_a_path(tmp_path, monkeypatch):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD + GOOD.replace("my-card", "l4").replace("My Card", "L4 measured")
                    + "context_bytes = 400_000_000\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    table = load_gpus()
    assert table["my-card"].memory_bytes == 16 << 30 and table["my-card"].context_estimated
    assert table["l4"].name == "L4 measured" and table["l4"].context_bytes == 400_000_000
    assert not table["l4"].context_estimated
    monkeypatch.delenv(ENV_VAR)
    assert "my-card" not in load_gpus() and "my-card" in load_gpus([path])
    assert [g.key for g in resolve_gpus(["MY-CARD,h200", "h200"], [path])] == ["my-card", "h200"]


@pytest.mark.parametrize("edit,field", [
    (lambda t: t.replace('name = "My Card"\n', ""), "'name' is missing"),
    (lambda t: t.replace("memory_bytes = 17_179_869_184", 'memory_bytes = "16GB"'), "'memory_bytes' must be a positive integer"),
    (lambda t: t.replace("memory_bytes = 17_179_869_184", "memory_bytes = 1.5e10"), "'memory_bytes'"),
    (lambda t: t.replace('compute_capability = "8.6"', "compute_capability = 8.6"), "'compute_capability'"),
    (lambda t: t.replace("bf16 = 142.0, ", ""), "'tflops.bf16' is missing"),
    (lambda t: t.replace("fp16 = 142.0", "fp16 = -1"), "'tflops.fp16' must be a positive number"),
    (lambda t: t.replace("fp16 = 142.0", "fp16 = 142.0, int4 = 9"), "'tflops.int4' is not a known dtype"),
    (lambda t: t.replace("sm_count = 84", "sm_count = 84\nmemory = 3"), "'memory' is not a known field"),
    (lambda t: t.replace("sm_count = 84", "sm_count = true"), "'sm_count'"),
])
def test_a_wrong_or_missing_field_is_named(tmp_path, edit, field):
    path = tmp_path / "bad.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(GpuTableError) as info:
        read_table(path)
    message = str(info.value)
    assert field in message and "my-card" in message and str(path) in message and "\n" not in message
    assert isinstance(info.value, UserError)


def test_unreadable_or_empty_files_are_one_line_errors(tmp_path):
    for text, words in (("not = [toml", "not valid TOML"), ("x = 1", "no [gpus.NAME]"), ("", "no [gpus.NAME]")):
        path = tmp_path / "f.toml"
        path.write_text(text)
        with pytest.raises(GpuTableError, match=words.replace("[", r"\[")):
            read_table(path)
    with pytest.raises(GpuTableError, match="not found"):
        read_table(tmp_path / "missing.toml")


def test_an_unknown_gpu_lists_the_known_names():
    with pytest.raises(UnknownGpu) as info:
        get_gpu("h800")
    assert "h800" in str(info.value) and all(k in str(info.value) for k in REQUIRED_GPUS)
    assert get_gpu(" H100-SXM ").key == "h100-sxm"


def test_attnprof_gpus_lists_every_gpu_with_its_source():
    result = runner.invoke(app, ["gpus"])
    assert result.exit_code == 0, result.output
    for key in REQUIRED_GPUS:
        assert f"\n{key} " in result.output and f"  {key}: " in result.output
    rows = json.loads(runner.invoke(app, ["gpus", "--json"]).output)
    assert {r["key"] for r in rows} >= set(REQUIRED_GPUS)
    h100 = next(r for r in rows if r["key"] == "h100-sxm")
    assert h100["memory_bytes"] == 81559 << 20 and h100["tflops"]["fp16"] == 989.4


def attnprof(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_cli_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("sm_count = 84\n", ""))
    for args, env, words in ((["predict", "--gpu", "h800", "--seq-len", "256"], None, "unknown GPU 'h800'; known: "),
                             (["gpus", "--gpu-file", str(bad)], None, "field 'sm_count' is missing"),
                             (["gpus"], {ENV_VAR: str(bad)}, "field 'sm_count' is missing")):
        result = attnprof(*args, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


def test_listing_gpus_imports_no_torch():
    code = textwrap.dedent("""
        import contextlib, io, sys
        import attnprof.cli
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                attnprof.cli.main(["gpus"])
            except SystemExit as exc:
                assert exc.code == 0, exc.code
        print(sorted(m for m in ("torch", "pandas", "matplotlib", "numpy") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
