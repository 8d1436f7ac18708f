"""How every command of the command line ends: its exit code, one ``error: ...`` line for a
user mistake (never a traceback), "interrupted" for Ctrl-C and SIGTERM (128 + the signal;
both raised where it is safe: profiler/safe_points.py), and the quick exit of short
commands run from the console (``cli.main``)."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import typer
from typer.core import TyperGroup

from attnprof.errors import UserError
from attnprof.profiler import safe_points
from attnprof.profiler.units import printable

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130  # and 1: the gate found a regression (its own code)


def interrupted_code() -> int:
    """128 + the signal that ended the command (SIGINT when none was seen: a Ctrl-C that
    Python's own handler raised)."""
    return 128 + (safe_points.received() or signal.SIGINT)


def one_line(exc: BaseException) -> str:
    """An error as one line, control characters spelled out (``printable``): a message may
    quote a file, a cache or a run folder. attnprof's own refusals (``UserError``) are one
    line already, so a line break in them is inside a name they quote and is spelled out
    (cutting there named another path: 'run folder not found: /tmp/r' for '/tmp/r\\nb');
    of anything else, the first line."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return printable(text if isinstance(exc, UserError) else text.splitlines()[0])


def say(text, err: bool = False) -> None:
    """Echo ``text`` line by line through ``printable``: what reaches the terminal from a
    file, a cache or a run folder (a note, a name, a reason) never runs an escape sequence
    or breaks a line."""
    typer.echo("\n".join(printable(line) for line in str(text).split("\n")), err=err)


def say_line(text, err: bool = False) -> None:
    """Echo ``text`` as ONE line, every control character spelled out, newlines too
    (``printable``): a message that names a path, a scenario or a reason from a file, where
    a newline inside the name would otherwise print as a line of its own (``PASS`` under a
    banner)."""
    typer.echo(printable(text), err=err)


class Commands(TyperGroup):
    """Every command runs inside this group: a UserError from anywhere below (flags,
    files, the library) ends as ``error: ...`` and its exit code (2, the UserError
    default; 1 for a run folder that cannot be written); Ctrl-C as exit 130."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"error: {one_line(exc)}", err=True)
            raise typer.Exit(getattr(exc, "exit_code", EXIT_USAGE)) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(interrupted_code()) from None


QUICK_EXIT = frozenset({"predict", "calibrate"})


def leave(code: int, args: list, console: bool) -> NoReturn:
    if console and code == 0 and safe_points.received() is not None:  # a signal no KeyboardInterrupt ended
        typer.echo("interrupted", err=True)
        code = interrupted_code()
    if console and args and args[0] in QUICK_EXIT:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (| head): nothing more to say
                pass
        os._exit(code)
    sys.exit(code)
