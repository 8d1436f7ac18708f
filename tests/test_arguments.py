"""The API checks its arguments against its own annotations: a wrong type is one line, a
``UserError`` subclass naming the function and the argument, never a bare TypeError deep
inside; a single path (or value) where a list is expected is that one item."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnprof import api
from attnprof.arguments import ArgumentError, checked
from attnprof.errors import UserError
from gpu_samples import MY_CARD_TOML

GPU_FILE = MY_CARD_TOML


@pytest.mark.parametrize("call,words", [
    (lambda: api.predict(variants=5), "api.predict: variants must be str or a list of them or None, got int 5"),
    (lambda: api.predict(seq_lens=["512"]), "seq_lens must be int or a list of them"),
    (lambda: api.predict(batch=2.0), "batch must be int or None"),
    (lambda: api.predict(forward_only="yes"), "forward_only must be bool or None"),
    (lambda: api.predict(budget=[80]), "budget must be str or int or None"),
    (lambda: api.predict(gpu_files=5), "gpu_files must be a path (str or Path) or a list of them"),
    (lambda: api.predict(scenario=3), "scenario must be"),
    (lambda: api.predict(variant="sdpa"), "unexpected keyword argument 'variant'"),
    (lambda: api.calibrate(threads="2"), "api.calibrate: threads must be int or None, got str '2'"),
    (lambda: api.calibrate(threads=True), "threads must be int"),
    (lambda: api.sweep(out=5), "api.sweep: out must be"),
    (lambda: api.sweep(on_start="print"), "on_start must be a function or None"),
    (lambda: api.report(5), "api.report: run_dir must be a path"),
    (lambda: api.report("run", seconds="7"), "seconds must be float"),
    (lambda: api.gate("run", baseline=None), "api.gate: baseline must be a path"),
    (lambda: api.gate("run", baseline="b.json", tolerance=[2]), "tolerance must be str or float"),
    (lambda: api.gpu_table(gpus=3), "api.gpu_table: gpus must be"),
    (lambda: api.build_scenario(heads="4"), "api.build_scenario: heads must be int or None"),
    (lambda: api.default_memory_limit(0), "api.default_memory_limit: device must be str"),
])
def test_a_wrong_type_is_one_line_naming_the_function_and_argument(call, words):
    with pytest.raises(ArgumentError) as info:
        call()
    assert isinstance(info.value, UserError) and isinstance(info.value, api.UsageProblem)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_single_path_is_a_list_of_one(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GPU_FILE)
    for given in (str(path), path, [str(path)], (path,)):
        assert "my-card" in {g.key for g in api.gpu_table(gpu_files=given)}, given


def test_a_single_length_is_a_list_of_one():
    result = api.predict(variants="sdpa", modes="plain", seq_lens=256, d_model=32, heads=2, layers=1)
    assert [r["seq_len"] for r in result.records] == [256]


def test_the_checks_follow_the_annotations_and_judge_nothing_else():
    @checked
    def f(a: int, b: "Path | None" = None, *, c: list = (), d=object()) -> None:
        return a, c, d

    assert f(1, c=[1, "x"])[0] == 1 and f(1, Path("p"))[0] == 1 and f(1, None)[0] == 1
    with pytest.raises(ArgumentError, match="api.f: b must be Path or None, got str 'p'"):
        f(1, "p")
    with pytest.raises(ArgumentError, match="api.f: a must be int, got str 'x'"):
        f("x")
