"""The runner's errors, in a module of their own so that every runner module can raise
them without importing the sweep (which imports them all)."""

from __future__ import annotations

from attnprof.errors import UserError


class SweepError(UserError):
    """A sweep that cannot start; one line, exit 2."""


class StorageError(UserError):
    """The run folder cannot be written (disk full, I/O error). One line, exit code 1:
    not a user mistake, but nothing is lost; every record before it is intact."""

    exit_code = 1
