"""How a command ends: one line of a multi-line error, SIGTERM as Ctrl-C (its signal kept
for the exit code 128 + N)."""

from __future__ import annotations

import signal

import pytest

from attnprof.cli_exits import TERMINATED, one_line, terminate


def test_one_line_keeps_the_first_line_or_names_the_error():
    assert one_line(ValueError("bad value\n  at line 2")) == "bad value"
    assert one_line(KeyError()) == "KeyError"


def test_sigterm_is_a_keyboard_interrupt_that_remembers_its_signal():
    before = list(TERMINATED)
    with pytest.raises(KeyboardInterrupt):
        terminate(signal.SIGTERM, None)
    assert TERMINATED[-1] == signal.SIGTERM
    TERMINATED[:] = before
