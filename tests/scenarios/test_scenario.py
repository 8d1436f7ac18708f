"""Scenario files: every preset loads and plans; every hostile file or value is one
line (``ScenarioError``), field by field, never a traceback."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from attnprof.errors import UserError
from attnprof.scenarios.plan import series
from attnprof.scenarios.scenario import (MAX_FILE_BYTES, Scenario, ScenarioError, load_scenario,
                                         preset_names)


def one_line_error(fn) -> str:
    with pytest.raises(ScenarioError) as info:
        fn()
    text = str(info.value)
    assert text and "\n" not in text and isinstance(info.value, UserError)
    return text


def write(tmp_path, text: str | bytes, name: str = "mine.toml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --- what loads ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_by_name_and_by_path_and_plans(name):
    by_name = load_scenario(name)
    assert by_name.name == name and by_name.description
    assert load_scenario(by_name.source) == by_name  # the same file, named by its path
    plan = series(by_name)
    assert plan and all(s for s in plan)


def test_a_file_sets_what_it_names_and_keeps_the_defaults_for_the_rest(tmp_path):
    path = write(tmp_path, 'variants = ["lsh[n_hashes=2]", "sdpa"]\nseq_lens = [512, 128]\nd_model = 64\n'
                           'point_timeout_s = 30\nforward_only = true\n')
    sc = load_scenario(str(path))
    assert (sc.name, sc.source) == ("mine", str(path))  # the name defaults to the file's stem
    assert sc.variants == ("lsh[n_hashes=2]", "sdpa") and sc.lengths() == [128, 512]
    assert (sc.d_model, sc.point_timeout_s, sc.forward_only) == (64, 30, True)
    assert (sc.heads, sc.layers, sc.scope) == (Scenario().heads, Scenario().layers, Scenario().scope)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = write(tmp_path, "\ufeffd_model = 64\n".encode("utf-8"))
    assert load_scenario(str(path)).d_model == 64


def test_to_dict_round_trips_and_lists_come_back_as_tuples():
    sc = Scenario(variants=["full", "lsh"], modes=["plain"], seq_lens=[256, 128])
    assert sc.variants == ("full", "lsh") and sc.seq_lens == (256, 128)
    assert Scenario(**sc.to_dict()) == sc


# --- hostile files ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expect", [
    ("modes = 3", "modes must be an array of strings"),
    ('variants = "lsh"', 'variants must be an array of strings'),
    ("variants = [1, 2]", "variants must be an array of strings"),
    ('variants = [["lsh"]]', "variants must be an array of strings"),
    ("seq_lens = [1.5]", "seq_lens must be an array of positive integers"),
    ("seq_lens = [true]", "seq_lens must be an array of positive integers"),
    ("seq_lens = [0, 256]", "seq_lens must be positive"),
    ("seq_lens = 1024", "seq_lens must be an array"),
    ('d_model = "x"', "d_model must be a positive integer, got 'x'"),
    ("d_model = 64.0", "d_model must be a positive integer"),
    ("heads = true", "heads must be a positive integer, got true"),
    ("layers = 0", "layers must be a positive integer"),
    ("batch = -1", "batch must be a positive integer"),
    ("warmup = -1", "warmup must be an integer >= 0"),
    ("warmup = true", "warmup must be an integer >= 0"),
    ("tokens_per_batch = 1.5", "tokens_per_batch must be an integer >= 0"),
    ("forward_only = 1", "forward_only must be true or false"),
    ("name = 3", "name must be a string"),
    ("description = [1]", "description must be a string"),
    ("scope = 1", "scope must be a string"),
    ('dtype = "int7"', "unknown dtype 'int7'"),
    ("point_timeout_s = inf", "point_timeout_s must be a finite number"),
    ("point_timeout_s = -inf", "point_timeout_s must be a finite number"),
    ("point_timeout_s = nan", "point_timeout_s must be a finite number"),
    ("point_timeout_s = 0", "point_timeout_s must be a finite number"),
    ("point_timeout_s = -5.0", "point_timeout_s must be a finite number"),
    ("point_timeout_s = 1e300", "at most"),
    ('point_timeout_s = "300"', "point_timeout_s must be a number"),
    ("point_timeout_s = true", "point_timeout_s must be a number"),
    ("[[d_model]]\nx = 1", "d_model must be a positive integer, got an array of tables"),
    ("[[variants]]\nname = 'lsh'", "variants must be an array of strings"),
    ("[heads]\nx = 1", "heads must be a positive integer, got a table"),
    ("seq_lens = [1099511627776]", "seq_len 1099511627776 is too long"),  # 2**40: n*n overflows int64
    ("seq_lens = [3037000500]", "overflows int64"),  # n*n just above 2**63
    ("min_len = 1024\nmax_len = 1099511627776", "overflows int64"),
    ("seq_lens = [1048576]\nbatch = 1099511627776", "overflows int64"),  # B*h*n*n, not n*n alone
    ("seq_lens = [1024]\ntokens_per_batch = 9223372036854775807", "overflows int64"),
    ("d_model = 4611686018427387904\nheads = 1", "d_model 2**62 is too large"),
    ("d_model = 4611686018427387904\nheads = 1\nffn_dim = 128", "d_model 2**62 with ffn_dim 128 is too large"),  # not ffn_dim alone
    ("layers = 100000000", "layers must be at most 10,000, got 100,000,000"),
    ("d_model = 100000000000000000000000000000", "d_model"),  # beyond int64 itself
    ("seq_lens = [256]\ntokens_per_batch = 128", "below the longest length 256"),
    ('colour = "red"', "unknown key 'colour'"),
    ("d_model = ", "not valid TOML"),
    ("variants = " + "[" * 3000 + "]" * 3000, "not valid TOML"),
])
def test_bad_values_are_one_line_naming_the_field(tmp_path, text, expect):
    path = write(tmp_path, text + "\n")
    message = one_line_error(lambda: load_scenario(str(path)))
    assert expect in message and "mine" in message


@pytest.mark.parametrize("content, expect", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", "binary file"),
    (b'name = "caf\xe9"\n', "not UTF-8 text (byte 0xe9 at offset 11)"),
    (b"\xff\xfed\x00_\x00m\x00", "binary file"),  # UTF-16
    (b"d_model = 64\n\x00", "binary file"),
])
def test_binary_and_non_utf8_files_are_refused(tmp_path, content, expect):
    path = write(tmp_path, content)
    assert expect in one_line_error(lambda: load_scenario(str(path)))


def test_a_directory_is_not_a_scenario(tmp_path, monkeypatch):
    folder = tmp_path / "runs.toml"
    folder.mkdir()
    assert "is a directory" in one_line_error(lambda: load_scenario(str(folder)))
    assert "is a directory" in one_line_error(lambda: load_scenario(str(tmp_path)))
    # a folder in the working directory that happens to share a preset's name does not hide it
    (tmp_path / "ci").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_scenario("ci").name == "ci"


def test_missing_files_unknown_presets_and_odd_names(tmp_path):
    assert "not found" in one_line_error(lambda: load_scenario(str(tmp_path / "nope.toml")))
    text = one_line_error(lambda: load_scenario("no-such-preset"))
    assert "unknown scenario 'no-such-preset'" in text and "ci" in text
    one_line_error(lambda: load_scenario(""))
    one_line_error(lambda: load_scenario("ci\x00.toml"))
    one_line_error(lambda: load_scenario("x" * 5000 + ".toml"))  # a name too long for the file system
    one_line_error(lambda: load_scenario(3))


def test_a_huge_file_is_refused_without_reading_it(tmp_path):
    path = write(tmp_path, "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    assert "bytes" in one_line_error(lambda: load_scenario(str(path)))


def test_a_device_is_not_a_regular_file():
    if not __import__("os").path.exists("/dev/null"):
        pytest.skip("no /dev/null here")
    assert "not a regular file" in one_line_error(lambda: load_scenario("/dev/null"))


# --- the same checks for values from flags and code -----------------------------------------
@pytest.mark.parametrize("values", [
    {"point_timeout_s": math.inf}, {"point_timeout_s": math.nan}, {"variants": "lsh"}, {"modes": 3},
    {"seq_lens": (1.5,)}, {"seq_lens": (2**40,)}, {"d_model": "x"}, {"heads": True}, {"dtype": "int7"},
    {"max_len": 2**40}, {"forward_only": "yes"},
])
def test_code_and_flag_overrides_are_checked_too(values):
    one_line_error(lambda: Scenario(**values))
    one_line_error(lambda: Scenario().override(**values))


def test_the_command_line_prints_one_line_and_exits_2(tmp_path):
    for content in ("seq_lens = [1099511627776]\n", "point_timeout_s = nan\n"):
        path = write(tmp_path, content)
        result = subprocess.run([sys.executable, "-m", "attnprof", "predict", "--scenario", str(path)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: scenario mine.toml: "), result.stderr
        assert "Traceback" not in result.stdout + result.stderr
