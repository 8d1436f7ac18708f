"""The command line's shared options: the scenario's flags, built from the one list of
scenario fields (``scenarios/fields.py``), and the flags several commands share.

``scenario_flags`` adds one option per field to a command (its type, help, panel and
metavar from the field), so ``predict`` and ``sweep`` never write them out, and a field
added to the table is a flag of both. Where they go among the command's own options (the
help pages list them in this order): the ``What to profile`` fields before ``--scenario``,
the shape and the lengths right after it, the measurement fields right after ``--device``.
Imports no torch (``--help`` stays light; tests/test_cli.py).
"""

from __future__ import annotations

import inspect
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, List, Optional, Sequence

import typer

from attnprof.profiler.records import DTYPE_ALIASES, DTYPES, MODES, SCOPES
from attnprof.profiler.runner.executors.base import EXECUTORS
from attnprof.scenarios.fields import FIELDS, LENGTHS, MEASURE, SHAPE, WHAT, Field

OUTPUT, SCALE, GPU_MODEL = "Output", "Scaling out (docs/scaling-out.md)", "GPU memory model"

# --- choices, each from its single source -------------------------------------------------------
Scope = Enum("Scope", {s: s for s in SCOPES}, type=str)
Dtype = Enum("Dtype", {d: d for d in (*DTYPES, *DTYPE_ALIASES)}, type=str)
ExecutorChoice = Enum("ExecutorChoice", {e: e for e in EXECUTORS}, type=str)
SortChoice = Enum("SortChoice", {"time": "time"}, type=str)


def _variants(values: Optional[List[str]]) -> Optional[List[str]]:
    """Names and option names against the variants' sources (no torch import); option
    values that need code to check (a power of two) are checked by the registry later."""
    if values:
        from attnprof.scenarios.variants.catalog import label_problem, split_labels

        for label in (label for value in values for label in split_labels(value)):
            problem = label_problem(label)
            if problem:
                raise typer.BadParameter(problem)
    return values


def _modes(values: Optional[List[str]]) -> Optional[List[str]]:
    if not values:
        return values
    modes = [m.strip() for value in values for m in value.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            raise typer.BadParameter(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return modes


def check_device(value: str) -> str:
    if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise typer.BadParameter(f"unknown device {value!r}; choose auto, cpu, cuda or cuda:N")


# --- the scenario's flags, from the field table ----------------------------------------------------
CHOICES = {"scope": Scope, "dtype": Dtype}  # text fields with a fixed set of values
CALLBACKS = {"variants": _variants, "modes": _modes}  # checked as they are parsed
KIND_TYPES = {"labels": Optional[List[str]], "lengths": Optional[List[int]], "count": Optional[int],
              "amount": Optional[int], "seconds": Optional[float], "switch": bool, "text": Optional[str]}


def option_of(f: Field) -> inspect.Parameter:
    """The command-line parameter of field ``f``: a switch defaults to False, the rest to None."""
    kind = Optional[CHOICES[f.name]] if f.name in CHOICES else KIND_TYPES[f.kind]
    extras = dict(metavar=f.metavar) if f.metavar else {}
    if f.name in CALLBACKS:
        extras["callback"] = CALLBACKS[f.name]
    if not f.show_default:
        extras["show_default"] = False
    option = typer.Option(*(f.flag, f.short) if f.short else (f.flag,), rich_help_panel=f.panel, help=f.help,
                          **extras)
    return inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=False if f.kind == "switch" else None,
                             annotation=Annotated[kind, option])


def scenario_flags(fields: Sequence[Field] = FIELDS) -> Callable:
    """A decorator: the command ``fn(..., **flags)`` with one option per field in place of
    ``**flags`` (placed as the module docstring says); ``fn`` gets them in ``flags``."""
    anchors = {WHAT: ("scenario", 0), SHAPE: ("scenario", 1), LENGTHS: ("scenario", 1), MEASURE: ("device", 1)}

    def wrap(fn: Callable) -> Callable:
        hints = typing.get_type_hints(fn, include_extras=True)  # typer reads the signature's, evaluated
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
               for p in inspect.signature(fn).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        names = [p.name for p in own]
        placed: dict[int, list] = {}  # index into own -> the fields inserted there
        for f in fields:
            anchor, after = anchors[f.panel]
            placed.setdefault(names.index(anchor) + after, []).append(option_of(f))
        params = [q for i in range(len(own) + 1) for q in (*placed.get(i, ()), *own[i:i + 1])]
        fn.__signature__ = inspect.Signature(params)
        fn.__annotations__ = {p.name: p.annotation for p in params}
        return fn

    return wrap


def api_keywords(flags: dict, fields: Sequence[Field] = FIELDS) -> dict:
    """The scenario's flags by their api keyword names (variant -> variants, ...): a choice
    as its text, a switch left off as None (the scenario's value stays)."""
    out = {}
    for f in fields:
        value = flags[f.param]
        if isinstance(value, Enum):
            value = value.value
        out[f.name] = (value or None) if f.kind == "switch" else value
    return out


# --- flags several commands share -------------------------------------------------------------------
ScenarioOpt = Annotated[Optional[str], typer.Option(
    "--scenario", "-s", metavar="NAME|PATH", rich_help_panel=WHAT, show_default=False,
    help="built-in scenario NAME ([bold]attnprof scenarios[/]) or a TOML PATH; the flags override its values.")]
JsonOpt = Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="print JSON to stdout, not a table")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", rich_help_panel=OUTPUT,
    help="neither read nor write the prediction cache (~/.cache/attnprof or $ATTNPROF_CACHE_DIR)")]
GpuFileOpt = Annotated[Optional[List[Path]], typer.Option(
    "--gpu-file", metavar="PATH", rich_help_panel=GPU_MODEL, show_default=False,
    help="a TOML file of more GPUs, in the form of attnprof/profiler/hardware/gpus.toml (repeatable; "
         "also ATTNPROF_GPUS=path.toml)")]
GpuOpt = Annotated[Optional[List[str]], typer.Option(
    "--gpu", metavar="NAME", rich_help_panel=GPU_MODEL, show_default=False,
    help="also MODEL the GPU memory on this GPU ([bold]attnprof gpus[/]; repeatable), predicted, never measured: "
         "predict: allocator allocated/reserved peaks and total = CUDA context + reserved, with --budget the "
         "longest length that fits that GPU; sweep/report: 'what fits where' and the capacity chart per named "
         "GPU instead of generic budgets")]
