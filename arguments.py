"""The API's argument checks, in one place: every public function of ``api`` is
``@checked``, so its arguments are checked against its own annotations before it runs.

Why from the annotations: the signature is the documentation a notebook user reads, and
a second, hand-kept list of expected types would drift from it. A wrong type is then one
line naming the function, the argument and what it takes (``ArgumentError``, a
``UserError``), not a bare ``TypeError`` from deep inside, or worse no error at all (a
path string where a list of paths is expected used to be read one character at a time).

Also here: ``refuse_ignored``, the keyword combinations where one keyword would be
silently ignored (``--seq-len`` with ``--min-len``, ``--batch`` with ``--tokens-per-batch``).

One convenience, the same everywhere: a single value where a sequence is expected is that
one value (``gpu_files="x.toml"``, ``seq_lens=512``). Values are checked, never converted:
``threads="2"`` is refused, not parsed. Hints this module does not know are not judged.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import numbers
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, Union

from attnprof.errors import UserError
from attnprof.profiler.units import printable

_SEQUENCES = (collections.abc.Sequence, list, tuple)
_UNIONS = (Union, types.UnionType)  # Optional[X], Union[X, Y] and X | Y
_REFUSED = object()  # "this value does not match the hint"


class UsageProblem(UserError):
    """A combination of values that makes no sense; one line."""


class ArgumentError(UsageProblem):
    """An API argument of the wrong type, or one the function does not take; one line."""


def checked(fn: Callable) -> Callable:
    """``fn`` with its arguments checked against its annotations (resolved on first call,
    when every name they use exists) and single values wrapped where sequences go."""
    signature = inspect.signature(fn)
    hints: dict = {}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not hints:
            hints.update(typing.get_type_hints(fn))
            hints.pop("return", None)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:  # an unknown keyword, a missing or surplus argument
            raise ArgumentError(f"api.{fn.__name__}: {exc}") from None
        for name, value in bound.arguments.items():
            if name in hints:
                bound.arguments[name] = _check(fn.__name__, name, value, hints[name])
        return fn(*bound.args, **bound.kwargs)

    return call


def _check(function: str, name: str, value, hint):
    found = _match(value, hint)
    if found is _REFUSED:
        shown = printable(repr(value))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ArgumentError(f"api.{function}: {name} must be {describe(hint)}, got {type(value).__name__} {shown}")
    return found


def _match(value, hint):
    """``value`` (a sequence where a single value was wrapped) when it matches ``hint``, else _REFUSED."""
    if hint is Any or hint is inspect.Parameter.empty:
        return value
    if hint is type(None):
        return value if value is None else _REFUSED
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        plain = [a for a in args if typing.get_origin(a) not in _SEQUENCES]  # "a" is a str before a sequence
        for option in [*plain, *(a for a in args if a not in plain)]:
            found = _match(value, option)
            if found is not _REFUSED:
                return found
        return _REFUSED
    if origin in _SEQUENCES or hint in (typing.Sequence, collections.abc.Sequence):
        item = args[0] if args else Any
        if isinstance(value, (list, tuple)):
            items = [_match(v, item) for v in value]
            return _REFUSED if any(v is _REFUSED for v in items) else type(value)(items)
        single = _match(value, item) if not isinstance(value, (bytes, dict, set)) else _REFUSED
        return _REFUSED if single is _REFUSED or not args else (single,)
    if origin is collections.abc.Callable or hint is typing.Callable:
        return value if callable(value) else _REFUSED
    if hint is bool:
        return value if isinstance(value, bool) else _REFUSED
    if hint is int:
        return value if isinstance(value, numbers.Integral) and not isinstance(value, bool) else _REFUSED
    if hint is float:
        return value if isinstance(value, numbers.Real) and not isinstance(value, bool) else _REFUSED
    if hint is Path:  # any os.PathLike: Path(value) takes it
        return value if isinstance(value, os.PathLike) else _REFUSED
    if isinstance(hint, type):
        return value if isinstance(value, hint) else _REFUSED
    return value  # a hint this module does not know: not judged


def describe(hint) -> str:
    """A hint as words: 'int or None', 'a path (str or Path) or a list of them'."""
    if hint is type(None):
        return "None"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        if set(args) == {str, Path}:
            return "a path (str or Path)"
        listed = {typing.get_args(a)[0] for a in args if typing.get_origin(a) in _SEQUENCES and typing.get_args(a)}
        named = [describe(a) for a in args if a is not type(None) and a not in listed]  # "str or a list of them"
        return " or ".join(named + (["None"] if type(None) in args else []))
    if origin in _SEQUENCES:
        inner = describe(args[0]) if args else ""
        return f"{inner} or a list of them" if inner else "a list"
    if origin is collections.abc.Callable:
        return "a function"
    return getattr(hint, "__name__", str(hint))


def refuse_ignored(sc, **given) -> None:
    """Keywords (flags) that the rest of the request would silently ignore, over the
    scenario ``sc`` they override (``given``: field name -> value, None or absent = not given):
    refused in one line, so nobody reads figures for a setting that was never applied."""
    if given.get("seq_lens") and (given.get("min_len") is not None or given.get("max_len") is not None):
        raise UsageProblem("--seq-len gives the lengths; --min-len/--max-len would be ignored: give one or the other")
    if given.get("batch") is not None and given.get("tokens_per_batch") is not None:
        raise UsageProblem("--tokens-per-batch sets the batch per length (tokens / length); --batch would be ignored")
    scope = given.get("scope")
    if (scope if scope is not None else sc.scope) == "attention":
        flags = [flag for flag, name in (("--mode", "modes"), ("--layers", "layers"), ("--ff-chunks", "ff_chunks"),
                                         # --- issue 24: block options ---
                                         ("--mlp", "mlp"), ("--ffn-dim", "ffn_dim"), ("--norm", "norm"))
                 if given.get(name) is not None]
        if flags:
            raise UsageProblem(f"scope attention profiles the attention core alone; {', '.join(flags)} "
                               f"(for the model's stack) would be ignored")
