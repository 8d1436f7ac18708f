"""attnprof's command line: thin glue over ``attnprof.api`` (variants, scenarios,
predict, sweep, report, gate, export).

Exit codes: 0 done; 1 the gate found a memory regression; 2 a user mistake (one line
``error: ...`` on stderr, never a traceback); 128+N interrupted by signal N (130 Ctrl-C).
Start-up is kept light: ``--help``, ``variants`` and ``scenarios`` import neither torch
nor pandas nor matplotlib (the commands that measure import them when they run).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from attnprof.cli_options import (LENGTHS, MEASURE, OUTPUT, SCALE, ExecutorChoice, GpuFileOpt, GpuOpt, JsonOpt,
                                  NoCacheOpt, ScenarioOpt, SortChoice, api_keywords, check_device, scenario_flags)
from attnprof.cli_exits import EXIT_USAGE, QUICK_EXIT, Commands, interrupted_code, leave, one_line, say, say_line
from attnprof.errors import UserError
from attnprof.profiler import safe_points
from attnprof.profiler.units import REPORT_SECONDS, printable, strict_json
from attnprof.scenarios.fields import FIELDS

EXAMPLES = """[bold]Examples[/]

  attnprof sweep --out runs/first      [dim]# every variant x mode, then report.html[/]
  attnprof sweep --max-len 65536 --device cpu --d-model 128 --heads 4 --layers 1
  attnprof predict --d-model 1024 --heads 16 --layers 12 --dtype bf16 --budget 80GiB
  attnprof predict --variant sdpa --dtype bf16 --seq-len 32768 --gpu h100-sxm --gpu l4
  attnprof report runs/first --baseline runs/older
  attnprof gate --baseline .ci/baseline.json runs/ci
"""

app = typer.Typer(cls=Commands, add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  rich_markup_mode="rich", epilog=EXAMPLES,
                  help="attnprof: peak memory and time of attention variants, forward and backward, "
                       "up to 64K tokens.")

PREDICT_FIELDS = tuple(f for f in FIELDS if f.for_predict)  # the measurement fields are the sweep's


# --- listings (no torch) ------------------------------------------------------------------------
@app.command()
def variants(as_json: JsonOpt = False):
    """List the attention variants: description, paper, options (type, default, meaning)."""
    from attnprof.scenarios.variants.catalog import StaticReadError, variants as listed

    try:
        found = [v for v in listed() if not v.hidden]
    except StaticReadError:  # a construct the reader does not know: ask the registry (imports torch)
        found = _variants_from_registry()
    if as_json:
        from dataclasses import asdict

        typer.echo(strict_json([asdict(v) for v in found], indent=1))
        return
    for v in found:
        say_line(f"{v.name:<15} {v.description}")
        if v.paper:
            say_line(f"{'':<15} paper: {v.paper}")
        for o in v.options:
            say_line(f"{'':<15} option {o.name} ({o.type}, default {o.default}): {o.help}")


def _variants_from_registry() -> list:
    from attnprof.scenarios.variants.catalog import OptionInfo, VariantInfo
    from attnprof.scenarios.variants.registry import get_variant, variant_names

    out = []
    for name in variant_names():
        cls = get_variant(name)
        if not getattr(cls, "hidden", False):
            options = tuple(OptionInfo(k, o.type.__name__, o.default, o.help) for k, o in cls.OPTIONS.items())
            out.append(VariantInfo(name, cls.description, cls.paper, options))
    return out


@app.command()
def gpus(gpu_file: GpuFileOpt = None, as_json: JsonOpt = False):
    """List the GPUs --gpu knows: memory, bandwidth, peak dense TFLOP/s per dtype, compute capability, datasheet."""
    from attnprof import api

    found = api.gpu_table(gpu_files=gpu_file or ())
    if as_json:
        typer.echo(strict_json([g.to_dict() for g in found], indent=1))
        return
    from attnprof.profiler.hardware.gpus import format_gpus

    typer.echo(format_gpus({g.key: g for g in found}))


@app.command()
def scenarios():
    """List the built-in scenario files (use with --scenario NAME)."""
    from attnprof.scenarios.scenario import load_scenario, preset_names

    for name in preset_names():
        typer.echo(f"{name:<20} {load_scenario(name).description}")


# --- predict ------------------------------------------------------------------------------------
@app.command(epilog="[bold]Examples[/]\n\n"
             "  attnprof predict --variant full --scope attention --batch 1 --heads 1 --head-dim 64 "
             "--seq-len 65536 --forward-only\n\n"
             "  attnprof predict --d-model 1024 --heads 16 --layers 12 --dtype bf16 --budget 80GiB")
@scenario_flags(PREDICT_FIELDS)
def predict(scenario: ScenarioOpt = None,
            budget: Annotated[Optional[str], typer.Option(
                "--budget", metavar="SIZE", rich_help_panel=LENGTHS,
                help="a memory size, e.g. 80GiB: the longest power-of-two length that fits, per variant x mode")] = None,
            resolution: Annotated[Optional[int], typer.Option(
                "--resolution", metavar="TOKENS", rich_help_panel=LENGTHS, show_default=False,
                help="with --budget: the longest multiple of TOKENS that fits, not the longest power of two")] = None,
            gpu: GpuOpt = None, gpu_file: GpuFileOpt = None,
            sort: Annotated[Optional[SortChoice], typer.Option(
                "--sort", rich_help_panel=OUTPUT, show_default=False,
                help="time: rank the variant x mode points that fit by predicted step time, fastest first (on "
                     "this machine's CPU model; with --gpu on each GPU's)")] = None,
            timeline: Annotated[Optional[Path], typer.Option(
                "--timeline", metavar="DIR", rich_help_panel=OUTPUT, show_default=False,
                help="also write each point's predicted memory snapshot (pytorch.org/memory_viz) and Chrome trace "
                     "(ui.perfetto.dev) into DIR: docs/timelines.md")] = None,
            as_json: JsonOpt = False, no_cache: NoCacheOpt = False, **flags):
    """Predict peak memory, FLOPs and step time without allocating (fake tensors, any machine; 65536 tokens by default)."""
    from attnprof import api

    if sort is not None and as_json:
        raise api.UsageProblem("--sort time orders the table; --json prints every record unranked: give one of them")
    result = api.predict(scenario, budget=budget, gpus=gpu, gpu_files=gpu_file or (), resolution=resolution,
                         no_cache=no_cache, sort=sort.value if sort is not None else None, timeline=timeline,
                         **api_keywords(flags, PREDICT_FIELDS))
    for note in result.notes:  # warnings always; hints ("note: ...") only beside the table
        if not (as_json and note.startswith("note:")):
            say_line(note, err=True)
    if as_json:
        typer.echo(strict_json(result.records, indent=1))
    else:
        say(result.table())
    for path in result.timeline_files:
        typer.echo(f"wrote {printable(path)}", err=True)
    failed = result.failed()
    if failed:  # the table (or JSON) above holds every prediction that worked; the exit says some did not
        say_line(f"error: {failed}", err=True)
        raise typer.Exit(1)


@app.command("compare-timelines")
def compare_timelines(predicted: Annotated[Path, typer.Argument(metavar="PREDICTED", help="a predicted .memory.pickle")],
                      real: Annotated[Path, typer.Argument(metavar="REAL", help="a real snapshot (_dump_snapshot)")],
                      as_json: JsonOpt = False):
    """Compare a predicted memory snapshot with a real one: allocations, peaks, the first event that differs."""
    from attnprof.api.timelines import compare_timelines as compare

    result = compare(predicted, real)
    if as_json:
        typer.echo(strict_json(result.to_dict(), indent=1))
    else:
        say(result.text())


# --- calibrate ----------------------------------------------------------------------------------
@app.command()
def calibrate(as_json: JsonOpt = False,
              no_cache: Annotated[bool, typer.Option(
                  "--no-cache", rich_help_panel=OUTPUT, help="measure again, and replace the cached figures")] = False,
              threads: Annotated[Optional[int], typer.Option(
                  "--threads", metavar="N", show_default=False,
                  help="torch threads to measure with (default: torch's, as a sweep's timing pass)")] = None):
    """Measure this machine for the time model (GEMM rate per dtype, attention, bandwidth, per-op overhead; <= 15 s), cached."""
    from attnprof import api

    run = api.calibrate(no_cache=no_cache, threads=threads)
    for note in run.notes:
        say_line(note, err=True)
    if as_json:
        typer.echo(strict_json(run.to_dict(), indent=1))
    else:
        say(run.text())


# --- sweep --------------------------------------------------------------------------------------
@app.command(epilog="[bold]Examples[/]\n\n"
             "  attnprof sweep --out runs/first                [dim]# the default scenario, a few minutes on a CPU[/]\n\n"
             "  attnprof sweep --max-len 65536 --device cpu --d-model 128 --heads 4 --layers 1\n\n"
             "  attnprof sweep --scenario reformer-hashes --device cpu\n\n"
             "  attnprof sweep --out runs/first --resume       [dim]# complete an interrupted run[/]")
@scenario_flags()
def sweep(scenario: ScenarioOpt = None,
          device: Annotated[str, typer.Option(
              "--device", metavar="DEVICE", callback=check_device, rich_help_panel=MEASURE,
              help="auto (a GPU if there is one) | cpu | cuda | cuda:N")] = "auto",
          mem_limit: Annotated[Optional[str], typer.Option(
              "--mem-limit", metavar="SIZE", rich_help_panel=MEASURE,
              help="skip points predicted above this size (default: 80% of free RAM, or the GPU's memory)")] = None,
          out: Annotated[Optional[Path], typer.Option(
              "--out", "-o", rich_help_panel=OUTPUT, help="run folder (default runs/sweep-TIMESTAMP)")] = None,
          resume: Annotated[bool, typer.Option(
              "--resume", rich_help_panel=OUTPUT, help="complete an interrupted run folder")] = False,
          report: Annotated[bool, typer.Option(
              "--report/--no-report", rich_help_panel=OUTPUT, help="write report.html into the run folder")] = True,
          quiet: Annotated[bool, typer.Option(
              "--quiet", "-q", rich_help_panel=OUTPUT, help="no progress on stderr")] = False,
          timeline: Annotated[bool, typer.Option(
              "--timeline", rich_help_panel=OUTPUT,
              help="each point's predicted memory snapshot and Chrome trace into RUN/timelines (as predict "
                   "--timeline writes them), and with --device cuda its real snapshot beside them: docs/timelines.md")]
          = False,
          gpu: GpuOpt = None, gpu_file: GpuFileOpt = None,
          executor: Annotated[ExecutorChoice, typer.Option(
              "--executor", rich_help_panel=SCALE,
              help="local: this machine | ray: each point a Ray task on a cluster, one GPU each")] = "local",
          parallel: Annotated[Optional[int], typer.Option(
              "--parallel", metavar="N", rich_help_panel=SCALE, show_default=False,
              help="local: points at once, each pinned to its own GPU (default: one per visible GPU; 1 on a "
                   "CPU, where parallel points disturb each other's timings)")] = None,
          ray_address: Annotated[Optional[str], typer.Option(
              "--ray-address", metavar="ADDRESS", rich_help_panel=SCALE, show_default=False,
              help="the Ray head node, HOST:PORT (default: RAY_ADDRESS, a cluster running here, else a new "
                   "local one)")] = None,
          ray_cpus_per_point: Annotated[Optional[float], typer.Option(
              "--ray-cpus-per-point", metavar="N", rich_help_panel=SCALE, show_default=False,
              help="CPUs Ray reserves for each point (and its torch threads on a CPU sweep); default 1")] = None,
          gpu_types: Annotated[Optional[List[str]], typer.Option(
              "--gpu-types", metavar="TYPES", rich_help_panel=SCALE, show_default=False,
              help="ray: the sweep once per GPU type of the cluster, into OUT/TYPE/: all, or names such as "
                   "H100,A100")] = None, **flags):
    """Measure every variant x mode x length, each point in its own process: results.jsonl, then report.html."""
    from attnprof import api
    from attnprof.profiler.units import fmt_bytes

    def banner(run: api.SweepRun) -> None:  # after every check: a refusal prints only its error
        limit = fmt_bytes(run.mem_limit_bytes) if run.mem_limit_bytes else "each device's memory"
        say_line(f"attnprof sweep: scenario {run.scenario.name}, device {run.device}, executor "
            f"{executor.value}, memory limit {limit}, out {run.out}", err=True)  # a name from a file, a path

    run = api.sweep(scenario, **api_keywords(flags), device=device, mem_limit=mem_limit, out=out, resume=resume, report=report, progress=not quiet,
                    on_start=banner, log=lambda line: say_line(line, err=True), gpus=gpu,
                    gpu_files=gpu_file or (), executor=executor.value, parallel=parallel, ray_address=ray_address,
                    ray_cpus_per_point=ray_cpus_per_point, gpu_types=gpu_types, timeline=timeline)
    print_outcome(run)
    if run.interrupted:
        say_line(f"interrupted: every finished point is in {run.results_path}; "
            f"complete it with: attnprof sweep ... --out {run.out} --resume", err=True)
        raise typer.Exit(run.exit_code)
    if run.report_path:
        say_line(f"report: {run.report_path}")
    say_line(f"results: {run.results_path}")
    failure = run.failure()  # issue 38: a sweep that measured nothing is loud
    if failure:
        say_line(f"error: {failure}", err=True)  # it quotes a reason read back from the run folder
        raise typer.Exit(run.exit_code)


def print_outcome(run) -> None:
    from attnprof.profiler.runner.summary import outcome_line, phases_line, print_summary

    s = run.summary
    print_summary(run.records())
    typer.echo(outcome_line(s.wall_s, len(s.records), s.kept, s.compute_s, s.timed_s, run.capacity_s, s.ahead_s))
    phases = phases_line(s.records)  # issue 38: where a point's seconds go (this invocation's points)
    if phases:
        typer.echo(phases)


# --- report and gate ----------------------------------------------------------------------------
@app.command()
def report(run_dir: Annotated[Path, typer.Argument(
               help="a sweep's run folder, or a sweep --gpu-types OUT folder (its GPU types side by side)")],
           output: Annotated[Optional[Path], typer.Option(
               "--output", "-o", help="HTML file to write (default RUN_DIR/report.html)")] = None,
           baseline: Annotated[Optional[Path], typer.Option(
               "--baseline", help="what to compare against: another run folder")] = None,
           seconds: Annotated[float, typer.Option(
               "--seconds", help="time for capacity predictions the run lacks; 0 = none")] = REPORT_SECONDS,
           gpu: GpuOpt = None, gpu_file: GpuFileOpt = None, no_cache: NoCacheOpt = False,
           timeline_point: Annotated[Optional[List[str]], typer.Option(
               "--timeline-point", help="also chart this point's predicted memory over a step, by its label as the "
                                        "chart and the gate print it, e.g. 'sdpa plain n=1024' (repeatable)")] = None):
    """Render a self-contained HTML report with PNG charts from a run folder."""
    from attnprof import api

    path = api.report(run_dir, output=output, baseline=baseline, seconds=seconds, gpus=gpu, gpu_files=gpu_file or (),
                      no_cache=no_cache, log=lambda line: say_line(line, err=True),
                      timeline_points=timeline_point or ())
    say_line(f"report: {path}")


@app.command(epilog="[bold]Examples[/]\n\n"
             "  attnprof gate --baseline .ci/baseline.json runs/ci --json-out runs/ci/gate.json\n\n"
             "  attnprof gate --baseline .ci/baseline.json runs/ci --update   [dim]# accept the new figures[/]")
def gate(run_dir: Annotated[Optional[Path], typer.Argument(help="a sweep's run folder")] = None,
         baseline: Annotated[Path, typer.Option("--baseline", help="what to compare against: the committed "
                                                                   "baseline JSON")] = ...,
         tolerance: Annotated[str, typer.Option("--tolerance", help="relative tolerance, e.g. 2%")] = "2%",
         abs_tolerance: Annotated[str, typer.Option(
             "--abs-tolerance", help="absolute tolerance floor, e.g. 64KiB, 1MiB or 0")] = "64KiB",
         allow_missing: Annotated[bool, typer.Option(
             "--allow-missing", help="points missing on either side are not errors")] = False,
         skip_invalid: Annotated[bool, typer.Option(
             "--skip-invalid", help="leave out records that are not valid (named, and counted in the summary) "
                                    "instead of exit 2")] = False,
         markdown: Annotated[Optional[Path], typer.Option(
             "--markdown", help="write a Markdown summary to this file")] = None,
         json_out: Annotated[Optional[Path], typer.Option(
             "--json-out", help="write the comparison as JSON to this file")] = None,
         update: Annotated[bool, typer.Option("--update", help="write/refresh the baseline from RUN_DIR")] = False,
         run: Annotated[Optional[str], typer.Option(
             "--run", help="sweep this scenario on the CPU first, into RUN_DIR or a temporary folder")] = None):
    """Fail (exit 1) when a point's deterministic peak memory grew beyond tolerance; exit 2 when not comparable."""
    from attnprof import api

    result = api.gate(run_dir, baseline=baseline, tolerance=tolerance, abs_tolerance=abs_tolerance,
                      allow_missing=allow_missing, markdown=markdown, json_out=json_out, update=update,
                      run_scenario=run, log=lambda text: say(text, err=text.startswith("error: ")),  # the table: several lines
                      skip_invalid=skip_invalid)
    raise typer.Exit(result.exit_code)


# --- export (issue 25) ---------------------------------------------------------------------------
@app.command(epilog="[bold]Examples[/]\n\n"
             "  attnprof export runs/ci --format csv > ci.csv\n\n"
             "  attnprof export runs/ci --format parquet --out ci.parquet   [dim]# needs pyarrow: attnprof\\[parquet][/]\n\n"
             "  attnprof export runs/ci --format benchmark-action --out bench.json   [dim]# docs/ci-gate.md[/]")
def export(run_dir: Annotated[Path, typer.Argument(
               help="a sweep's run folder, or a sweep --gpu-types OUT folder")],
           format: Annotated[str, typer.Option(
               "--format", "-f", metavar="FORMAT",
               help="csv | parquet | json | benchmark-action (github-action-benchmark's customSmallerIsBetter)")]
           = "csv",
           out: Annotated[Optional[Path], typer.Option(
               "--out", "-o", help="file to write (default: stdout; Parquet needs a file)")] = None):
    """Write a run's records as a flat table (CSV, Parquet, JSON) or as github-action-benchmark's input."""
    from attnprof import api

    done = api.export(run_dir, format=format, out=out, log=lambda line: say_line(line, err=True))
    if done.out is None:
        typer.echo(done.data, nl=False)
    else:
        say_line(f"export: {done.records} record(s) as {done.format} in {done.out}", err=True)


# --- the console entry point ---------------------------------------------------------------------
# Commands that leave nothing behind once they return (output written, forked workers
# joined, cache files renamed into place, no atexit work of their own): the console entry
# point ends their process at once. Python's own teardown of torch and the fake-tensor
# machinery (every module dict, ~250k objects through the collector) takes 0.3-0.8 s on a
# 2-core machine, more than a prediction from the cache takes; the tests run both.
def main(argv: Optional[List[str]] = None) -> None:
    """``attnprof``: like ``app()``, but a usage error (an unknown flag, a value of the
    wrong type) is one ``error: ...`` line and exit 2, as every other mistake. Called
    as the console script (``argv`` None), ``predict`` and ``calibrate`` skip the
    interpreter's teardown (QUICK_EXIT)."""
    console = argv is None
    args = list(sys.argv[1:] if argv is None else argv) or ["--help"]
    if console:
        safe_points.install()  # Ctrl-C and SIGTERM: KeyboardInterrupt, where it is safe
    if console and args[0] in QUICK_EXIT:  # a short process: collect young objects less often (collector.py)
        from attnprof.profiler.collector import collect_less_often

        collect_less_often()
    try:
        code = app(args=args, prog_name="attnprof", standalone_mode=False)
    except UserError as exc:  # raised outside a command (e.g. in a flag's callback)
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
    except typer.TyperException as exc:  # a parsing error: unknown flag, bad value, missing argument
        typer.echo(f"error: {one_line(exc.format_message())}", err=True)
        sys.exit(EXIT_USAGE)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("interrupted", err=True)
        sys.exit(interrupted_code())
    leave(code if isinstance(code, int) else 0, args, console)


if __name__ == "__main__":
    main()
