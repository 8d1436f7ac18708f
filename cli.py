"""attnprof's command line: variants, scenarios, predict, sweep, report, gate.

Every user mistake ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

try:  # recent typer vendors click
    from typer._click import exceptions as _click_exceptions
except ImportError:  # pragma: no cover - older typer on top of click
    from click import exceptions as _click_exceptions
ClickException = _click_exceptions.ClickException
# click >= 8.2 raises this for a bare `attnprof`; older versions print the help themselves
NoArgsIsHelpError = getattr(_click_exceptions, "NoArgsIsHelpError", type("NoArgsIsHelpError", (Exception,), {}))

from attnprof.profiler.runner.plan import PlanError
from attnprof.profiler.units import fmt_bytes, parse_bytes
from attnprof.scenarios.variants.base import VariantError
from attnprof.scenarios.scenario import Scenario, ScenarioError, load_scenario
from attnprof.profiler.records import ShapeError, canonical_dtype

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="attnprof: peak memory and time of attention variants, forward and backward, up to 64K tokens.")


class UsageProblem(ValueError):
    """A flag combination that makes no sense; one line."""


def user_errors() -> tuple:
    import importlib

    found = [VariantError, ShapeError, ScenarioError, PlanError, UsageProblem]
    for module, name in (("attnprof.profiler.gate", "GateError"), ("attnprof.reports.render", "ReportError"),
                         ("attnprof.profiler.runner.sweep", "SweepError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


# --- shared flags -----------------------------------------------------------------------
VARIANT = typer.Option(None, "--variant", "-v", help="variant label, repeatable or comma list; options in brackets: lsh[n_hashes=8]. Default: all.")
MODE = typer.Option(None, "--mode", "-m", help="plain | checkpoint | reversible (repeatable). Default: all (scope model).")
SCOPE = typer.Option(None, "--scope", help="model (the stack, default) or attention (the core alone)")
SEQ_LEN = typer.Option(None, "--seq-len", "-n", help="sequence length, repeatable")


def build_scenario(scenario: Optional[str], *, variant, mode, scope, batch, heads, head_dim, d_model, layers,
                   dtype, seq_len, min_len, max_len, tokens_per_batch, forward_only, ff_chunks=None,
                   base: Optional[Scenario] = None, **extra) -> Scenario:
    """Flags over a scenario file over defaults -> one validated Scenario."""
    sc = load_scenario(scenario) if scenario else (base or Scenario())
    if head_dim is not None and d_model is not None:
        raise UsageProblem("give --head-dim or --d-model, not both")
    heads_ = heads if heads is not None else sc.heads
    if head_dim is not None:
        if head_dim <= 0:
            raise UsageProblem(f"--head-dim must be positive, got {head_dim}")
        d_model = head_dim * heads_
    if dtype is not None:
        dtype = canonical_dtype(dtype)
    for name, value in (("--seq-len", min(seq_len) if seq_len else None), ("--min-len", min_len), ("--max-len", max_len)):
        if value is not None and value <= 0:
            raise UsageProblem(f"{name} must be a positive length, got {value}")
    lengths = tuple(seq_len) if seq_len else (() if (min_len or max_len) else None)
    modes = tuple(m for item in (mode or []) for m in item.split(",") if m.strip()) or None
    variants = tuple(variant) if variant else None
    overrides = dict(variants=variants, modes=modes, scope=scope, batch=batch, heads=heads, d_model=d_model,
                     layers=layers, dtype=dtype, seq_lens=lengths, min_len=min_len, max_len=max_len,
                     tokens_per_batch=tokens_per_batch, forward_only=forward_only or None, ff_chunks=ff_chunks, **extra)
    changed = {k: v for k, v in overrides.items() if v is not None and v != getattr(sc, k)}
    sc = sc.override(**overrides)
    if changed:  # the file's description no longer tells the whole story
        told = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in changed.items())
        sc = sc.override(description=f"{sc.description} [overridden: {told}]".strip())
    if sc.min_len > sc.max_len and not sc.seq_lens:
        raise UsageProblem(f"--min-len {sc.min_len} is above --max-len {sc.max_len}")
    from attnprof.profiler.runner.plan import modes_of, shape_at, variant_specs

    shape_at(sc, sc.lengths()[0] if sc.lengths() else 1)  # validates d_model/heads/dtype
    modes_of(sc)
    for spec in variant_specs(sc):
        _runs_somewhere(spec, sc)
    return sc


def _runs_somewhere(spec, sc: Scenario) -> None:
    """A variant whose options fit none of the requested lengths is a user error; one
    that fits only some runs there, and its other points are skipped with the reason."""
    problems = []
    for n in sc.lengths():
        try:
            spec.check_shape(n, sc.heads, sc.d_model // sc.heads)
            return
        except VariantError as exc:
            problems.append(str(exc))
    if problems:
        raise VariantError(problems[-1])


# --- commands ------------------------------------------------------------------------------
@app.command()
def variants():
    """List the registered attention variants, with their options and papers."""
    from attnprof.scenarios.variants.registry import get_variant, variant_names

    for name in variant_names():
        cls = get_variant(name)
        if getattr(cls, "hidden", False):
            continue
        typer.echo(f"{name:<15} {cls.description}")
        typer.echo(f"{'':<15} paper: {cls.paper}")
        typer.echo(f"{'':<15} options: {cls.options_help()}")


@app.command()
def scenarios():
    """List the built-in scenario files (use with --scenario NAME)."""
    from attnprof.scenarios.scenario import preset_names

    for name in preset_names():
        typer.echo(f"{name:<20} {load_scenario(name).description}")


@app.command()
def predict(
    variant: Optional[List[str]] = VARIANT,
    mode: Optional[List[str]] = MODE,
    scope: Optional[str] = SCOPE,
    scenario: Optional[str] = typer.Option(None, "--scenario", help="take shape and variants from a scenario"),
    batch: Optional[int] = typer.Option(None, help="sequences per step"),
    heads: Optional[int] = typer.Option(None, help="attention heads"),
    head_dim: Optional[int] = typer.Option(None, "--head-dim", help="per-head width (sets d_model = heads x head_dim)"),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="model width"),
    layers: Optional[int] = typer.Option(None, help="transformer blocks"),
    dtype: Optional[str] = typer.Option(None, help="float32 | bfloat16 | float16 | float64"),
    seq_len: Optional[List[int]] = SEQ_LEN,
    min_len: Optional[int] = typer.Option(None, "--min-len", help="smallest power-of-two length"),
    max_len: Optional[int] = typer.Option(None, "--max-len", help="largest power-of-two length"),
    tokens_per_batch: Optional[int] = typer.Option(None, "--tokens-per-batch", help="batch = N / seq_len at each length"),
    ff_chunks: Optional[int] = typer.Option(None, "--ff-chunks", help="feed-forward in N sequence chunks"),
    forward_only: bool = typer.Option(False, "--forward-only", help="forward pass only, no backward"),
    budget: Optional[str] = typer.Option(None, help="e.g. 80GiB: longest power-of-two length that fits"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON array of records"),
):
    """Predict peak memory and FLOPs without allocating (fake tensors, any machine)."""
    from attnprof.profiler.runner.predict import predict_points, longest_fitting

    budget_bytes = None
    if budget is not None:
        try:
            budget_bytes = parse_bytes(budget)
        except ValueError as exc:
            raise UsageProblem(str(exc)) from None
    defaults = Scenario(min_len=65536, max_len=65536)
    sc = build_scenario(scenario, base=defaults, variant=variant, mode=mode, scope=scope, batch=batch, heads=heads,
                        head_dim=head_dim, d_model=d_model, layers=layers, dtype=dtype, seq_len=seq_len,
                        min_len=min_len, max_len=max_len, tokens_per_batch=tokens_per_batch,
                        forward_only=forward_only, ff_chunks=ff_chunks)
    if budget_bytes is not None:
        start = 1 << max(0, (min_len or 256) - 1).bit_length()  # the first power of two >= --min-len
        rows = longest_fitting(sc, budget_bytes, start=start, limit=max_len)
    else:
        rows = predict_points(sc)
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
    else:
        from attnprof.profiler.runner.predict import format_table

        typer.echo(format_table(rows, budget_bytes))


@app.command()
def sweep(
    variant: Optional[List[str]] = VARIANT,
    mode: Optional[List[str]] = MODE,
    scope: Optional[str] = SCOPE,
    scenario: Optional[str] = typer.Option(None, "--scenario", help="built-in scenario NAME or a TOML PATH (default: default)"),
    batch: Optional[int] = typer.Option(None, help="sequences per step"),
    heads: Optional[int] = typer.Option(None, help="attention heads"),
    head_dim: Optional[int] = typer.Option(None, "--head-dim", help="per-head width (sets d_model = heads x head_dim)"),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="model width"),
    layers: Optional[int] = typer.Option(None, help="transformer blocks"),
    dtype: Optional[str] = typer.Option(None, help="float32 | bfloat16 | float16 | float64"),
    seq_len: Optional[List[int]] = SEQ_LEN,
    min_len: Optional[int] = typer.Option(None, "--min-len", help="smallest power-of-two length"),
    max_len: Optional[int] = typer.Option(None, "--max-len", help="largest power-of-two length (65536 = the full range)"),
    tokens_per_batch: Optional[int] = typer.Option(None, "--tokens-per-batch", help="batch = N / seq_len at each length"),
    ff_chunks: Optional[int] = typer.Option(None, "--ff-chunks", help="feed-forward in N sequence chunks"),
    forward_only: bool = typer.Option(False, "--forward-only", help="forward pass only"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    repeats: Optional[int] = typer.Option(None, help="timed repetitions per point"),
    warmup: Optional[int] = typer.Option(None, help="untimed warm-up steps per point"),
    point_timeout: Optional[float] = typer.Option(None, "--point-timeout", help="seconds before a point is killed"),
    mem_limit: Optional[str] = typer.Option(None, "--mem-limit", help="skip points predicted above this (default: 80% of free RAM, or the GPU's memory)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run folder (default runs/sweep-TIMESTAMP)"),
    resume: bool = typer.Option(False, "--resume", help="complete an interrupted run folder"),
    report: bool = typer.Option(True, "--report/--no-report", help="render report.html into the run folder"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress lines"),
):
    """Measure every variant x mode x length, each point in its own process; writes results.jsonl and a report."""
    from datetime import datetime

    from attnprof.profiler.runner.summary import summary_table
    from attnprof.profiler.runner.sweep import SweepSettings, resolve_device, run_sweep

    for name, value in (("--repeats", repeats), ("--point-timeout", point_timeout)):
        if value is not None and value <= 0:
            raise UsageProblem(f"{name} must be positive, got {value}")
    if warmup is not None and warmup < 0:
        raise UsageProblem(f"--warmup must not be negative, got {warmup}")
    sc = build_scenario(scenario or "default", variant=variant, mode=mode, scope=scope, batch=batch, heads=heads,
                        head_dim=head_dim, d_model=d_model, layers=layers, dtype=dtype, seq_len=seq_len,
                        min_len=min_len, max_len=max_len, tokens_per_batch=tokens_per_batch,
                        forward_only=forward_only, ff_chunks=ff_chunks, repeats=repeats, warmup=warmup,
                        point_timeout_s=point_timeout)
    resolved = resolve_device(device)
    limit = None
    if mem_limit is not None:
        try:
            limit = parse_bytes(mem_limit)
        except ValueError as exc:
            raise UsageProblem(str(exc)) from None
    else:
        from attnprof.profiler.measure.gpu import default_memory_limit_bytes

        limit = default_memory_limit_bytes(resolved)
    out = out or Path("runs") / f"sweep-{datetime.now():%Y%m%d-%H%M%S}"
    settings = SweepSettings(device=resolved, mem_limit_bytes=limit, warmup=sc.warmup, repeats=sc.repeats,
                             point_timeout_s=sc.point_timeout_s)
    typer.echo(f"attnprof sweep: scenario {sc.name}, device {resolved}, memory limit {fmt_bytes(limit)}, out {out}", err=True)
    summary = run_sweep(sc, out, settings, resume=resume, show_progress=not quiet)
    from attnprof.profiler.runner.storage import load_run

    typer.echo(summary_table(load_run(out)))
    typer.echo(f"wall {summary.wall_s:.1f} s for {len(summary.records)} new points, {summary.kept} kept from before; "
               f"{summary.compute_s:.1f} s inside the points' processes (x{summary.wall_s / max(summary.compute_s, 1e-9):.2f}), "
               f"{summary.timed_s:.1f} s of timed forward/backward passes (x{summary.wall_s / max(summary.timed_s, 1e-9):.2f})")
    if summary.interrupted:
        typer.echo(f"interrupted: every finished point is in {out}/results.jsonl; "
                   f"complete it with: attnprof sweep ... --out {out} --resume", err=True)
        raise typer.Exit(130)
    if report:
        _capacity_for_report(sc, out)
        _render(out, None, None)
    typer.echo(f"results: {out}/results.jsonl")


def _capacity_for_report(sc: Scenario, out: Path) -> None:
    """Predict the lengths that decide the report's "longest length that fits" table, so
    none of its figures is an extrapolation (fake tensors; about a minute on 2 cores)."""
    import time

    from attnprof.profiler.runner.predict import capacity_predictions
    from attnprof.reports.capacity import BUDGETS_GIB, add_predictions

    started = time.perf_counter()
    typer.echo("predicting the longest length that fits 16-141 GiB for the report (fake tensors) ...", err=True)
    entries = capacity_predictions(sc, tuple(BUDGETS_GIB))
    add_predictions(out, entries)
    typer.echo(f"  {len(entries)} predictions in {time.perf_counter() - started:.1f} s", err=True)


def _render(run_dir: Path, output: Optional[Path], baseline: Optional[Path], seconds: float = 7.0) -> None:
    from attnprof.reports.render import render_report

    path = render_report(run_dir, output, baseline, seconds=seconds)
    typer.echo(f"report: {path}")


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a sweep's run folder"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="HTML path (default RUN_DIR/report.html)"),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="another run folder to compare against"),
    seconds: float = typer.Option(7.0, "--seconds", help="time for capacity predictions the run lacks; 0 = none"),
):
    """Render a self-contained HTML report with PNG charts from a run folder."""
    if seconds < 0:
        raise UsageProblem(f"--seconds must not be negative, got {seconds}")
    _render(run_dir, output, baseline, seconds)


@app.command()
def gate(
    run_dir: Optional[Path] = typer.Argument(None, help="a sweep's run folder"),
    baseline: Path = typer.Option(..., "--baseline", help="committed baseline JSON"),
    tolerance: str = typer.Option("2%", "--tolerance", help="relative tolerance, e.g. 2%"),
    abs_tolerance: str = typer.Option("64KiB", "--abs-tolerance", help="absolute tolerance floor, e.g. 64KiB, 1MiB or 0"),
    allow_missing: bool = typer.Option(False, "--allow-missing", help="points missing on either side are not errors"),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="write a Markdown summary here"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the comparison as JSON here"),
    update: bool = typer.Option(False, "--update", help="write/refresh the baseline from RUN_DIR"),
    run: Optional[str] = typer.Option(None, "--run", help="run this scenario (CPU) instead of reading RUN_DIR"),
):
    """Fail (exit 1) when any point's deterministic memory grew beyond tolerance; exit 2 when not comparable."""
    from attnprof.profiler.gate import run_gate

    if run is not None:
        run_dir = _gate_run(run, run_dir)
    if run_dir is None:
        raise UsageProblem("give RUN_DIR or --run SCENARIO")
    code = run_gate(baseline, run_dir, tolerance_pct=tolerance, abs_tolerance_bytes=abs_tolerance, allow_missing=allow_missing,
                    markdown_file=markdown, json_file=json_out, update=update, out=_echo_routed)
    raise typer.Exit(code)


def _echo_routed(line: str) -> None:
    """Errors to stderr, everything else to stdout."""
    typer.echo(line, err=str(line).startswith("error: "))


def _gate_run(scenario_name: str, run_dir: Optional[Path]) -> Path:
    import tempfile

    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep

    sc = load_scenario(scenario_name)
    out = run_dir or Path(tempfile.mkdtemp(prefix="attnprof-gate-"))
    settings = SweepSettings(device="cpu", warmup=sc.warmup, repeats=sc.repeats, point_timeout_s=sc.point_timeout_s)
    run_sweep(sc, out, settings, resume=True, show_progress=False)
    return out


def main() -> None:
    """Console entry point: one-line errors, exit 2, no tracebacks for user mistakes."""
    errors = user_errors()
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except ClickException as exc:
        typer.echo(f"error: {exc.format_message().splitlines()[0]}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except errors as exc:
        typer.echo(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
