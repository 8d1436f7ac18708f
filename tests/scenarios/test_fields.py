"""The one list of scenario fields (scenarios/fields.py): every field described in full,
and the Scenario attributes, the api keywords and the command-line flags all one set,
derived from it (a field added to a table shows up in all of them)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import typer
from typer.testing import CliRunner

from attnprof import api
from attnprof.api.overrides import overridable
from attnprof.cli import app
from attnprof.cli_options import api_keywords, scenario_flags
from attnprof.scenarios.fields import FIELDS, MEASURE, PANELS, STORED, Field, flag_problem
from attnprof.scenarios.scenario import Scenario

PROVENANCE = {"name", "description", "source"}  # where a scenario came from, not a setting


def _options(command: str) -> set[str]:
    click_command = typer.main.get_command(app).commands[command]
    return {p.name for p in click_command.params}


def test_every_field_has_a_type_unit_default_and_help():
    for f in FIELDS:
        assert f.hint is not None and isinstance(f.unit, str) and f.help.strip() and f.flag.startswith("--"), f
        assert f.panel in PANELS, f
        if f.stored:
            assert Scenario().__getattribute__(f.name) == f.default, f  # the default is the table's
    assert len({f.name for f in FIELDS}) == len(FIELDS) and len({f.flag for f in FIELDS}) == len(FIELDS)


def test_scenario_api_and_cli_take_the_same_fields():
    stored = {f.name for f in dataclasses.fields(Scenario)} - PROVENANCE
    assert stored == {f.name for f in STORED}
    every = {f.name for f in FIELDS}
    assert every <= set(inspect.signature(api.build_scenario).parameters)
    assert every <= set(inspect.signature(api.sweep).parameters)
    predicted = {f.name for f in FIELDS if f.panel != MEASURE}
    assert predicted <= set(inspect.signature(api.predict).parameters)
    assert not (every - predicted) & set(inspect.signature(api.predict).parameters)
    assert {f.param for f in FIELDS} <= _options("sweep")
    assert {f.param for f in FIELDS if f.for_predict} <= _options("predict")
    assert not {f.param for f in FIELDS if not f.for_predict} & _options("predict")


def test_a_field_added_to_a_table_is_an_api_keyword_and_a_flag():
    table = (*FIELDS, Field("chunk_size", int | None, "tokens", 64, "a new knob", "--chunk-size", MEASURE))

    @overridable(table)
    def library(scenario=None, *, device: str = "cpu", **overrides):
        return overrides

    assert "chunk_size" in inspect.signature(library).parameters
    assert library(chunk_size=128) == {"chunk_size": 128}

    seen = {}
    mini = typer.Typer()

    @mini.command()
    @scenario_flags(table)
    def command(scenario: str = "", device: str = "cpu", **flags):
        seen.update(api_keywords(flags, table))

    result = CliRunner().invoke(mini, ["--chunk-size", "128", "--forward-only", "--max-len", "512"])
    assert result.exit_code == 0, result.output
    assert seen["chunk_size"] == 128 and seen["forward_only"] is True and seen["max_len"] == 512
    assert seen["batch"] is None


@pytest.mark.parametrize("given, words", [
    ({"seq_lens": [0, 512]}, "--seq-len must be a positive length, got 0"),
    ({"min_len": 0}, "--min-len must be a positive length, got 0"),
    ({"warmup": -1}, "--warmup must not be negative, got -1"),
    ({"point_timeout_s": 0.0}, "--point-timeout must be positive, got 0.0"),
    ({"tokens_per_batch": 0}, "--tokens-per-batch must be a positive number of tokens, got 0"),
    ({"warmup": 0, "seq_lens": [], "min_len": None}, None),
])
def test_flag_values_are_refused_in_flag_words(given, words):
    problem = flag_problem(given)
    assert problem is None if words is None else problem.startswith(words)
