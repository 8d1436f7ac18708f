"""The command line's shared options (cli_options): one flag per scenario field, placed
among a command's own options as the help pages list them, checked as they are parsed,
and handed back by their api keyword names."""

import inspect

import pytest
import typer
from typer.testing import CliRunner

from attnprof.cli_options import api_keywords, check_device, scenario_flags
from attnprof.scenarios.fields import FIELDS, MEASURE, WHAT


def mini_command():
    """A one-command app with every scenario flag; what it got, by api keyword, lands in ``seen``."""
    seen = {}
    app = typer.Typer()

    @app.command()
    @scenario_flags()
    def command(scenario: str = "", device: str = "cpu", **flags):
        seen.update(api_keywords(flags))

    @app.command()
    def other():  # two commands: invoked by name, as attnprof's are
        pass

    return app, command, seen


def invoke(*args):
    app, _, seen = mini_command()
    result = CliRunner().invoke(app, ["command", *args])
    return result, seen


def test_every_field_is_a_flag_placed_around_its_anchor():
    _, command, _ = mini_command()
    names = list(inspect.signature(command).parameters)
    assert set(names) == {"scenario", "device", *(f.param for f in FIELDS)}
    what = [f.param for f in FIELDS if f.panel == WHAT]
    measure = [f.param for f in FIELDS if f.panel == MEASURE]
    assert names[:len(what)] == what and names[len(what)] == "scenario"  # What to profile before --scenario
    at = names.index("device")
    assert names[at + 1:at + 1 + len(measure)] == measure  # the measurement fields right after --device


def test_parsed_flags_come_back_by_their_api_names_choices_as_text_switches_off_as_none():
    result, seen = invoke("--variant", "full,lsh[n_hashes=2]", "--mode", "plain,checkpoint", "--scope", "attention",
                          "--max-len", "512")
    assert result.exit_code == 0, result.output
    assert seen["variants"] == ["full,lsh[n_hashes=2]"] and seen["modes"] == ["plain", "checkpoint"]
    assert seen["scope"] == "attention" and type(seen["scope"]) is str and seen["max_len"] == 512
    switches = [f.name for f in FIELDS if f.kind == "switch"]
    assert switches and all(seen[name] is None for name in switches)
    assert seen["seq_lens"] is None and seen["dtype"] is None  # not given: the scenario's value stays


@pytest.mark.parametrize("args, fragment", [
    (["--mode", "plain,sideways"], "unknown mode 'sideways'"),
    (["--variant", "no_such_variant"], "no_such_variant"),
    (["--variant", "lsh[no_such_option=1]"], "no_such_option"),
    (["--scope", "everything"], "everything"),
])
def test_bad_values_are_refused_as_they_are_parsed(args, fragment):
    result, seen = invoke(*args)
    assert result.exit_code == 2 and fragment in result.output and not seen


@pytest.mark.parametrize("value", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_known_devices_pass(value):
    assert check_device(value) == value


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:-1"])
def test_unknown_devices_are_refused_naming_the_choices(value):
    with pytest.raises(typer.BadParameter, match="choose auto, cpu, cuda or cuda:N"):
        check_device(value)
