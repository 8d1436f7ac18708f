"""The one base class of every mistake a user can make, and nothing else.

Each part of attnprof raises its own subclass (``VariantError``, ``ScenarioError``,
``GateError``, ...) with a one-line message. The CLI maps any ``UserError`` to that
line on stderr and exit code 2: never a traceback. Library callers can catch
``UserError`` alone.
"""


class UserError(ValueError):
    """Bad input from the user; ``str(exc)`` is one line meant for them."""

    exit_code = 2
