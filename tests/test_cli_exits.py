"""How a command ends: one line of a multi-line error; Ctrl-C and SIGTERM "interrupted",
exit 128 + the signal, also when the signal came but no KeyboardInterrupt ended the command."""

from __future__ import annotations

import signal

import pytest

import attnprof.cli_exits as exits
from attnprof.cli_exits import interrupted_code, one_line
from attnprof.profiler import safe_points


def test_one_line_keeps_the_first_line_or_names_the_error():
    assert one_line(ValueError("bad value\n  at line 2")) == "bad value"
    assert one_line(KeyError()) == "KeyError"


def test_text_from_files_reaches_the_terminal_spelled_out(capsys):
    """Issue 40, item 2: an error or a note may quote a file, a cache or a run folder; its
    escape sequences and bidi overrides are spelled out, one line stays one line."""
    assert one_line(ValueError("bad \x1b[2J name\u202e\nline 2")) == "bad \\x1b[2J name\\u202e"
    from attnprof.errors import UserError  # attnprof's own refusal: one line whose line breaks are in a name

    assert one_line(UserError("run folder not found: /tmp/r\nb\u2028c")) == "run folder not found: /tmp/r\\nb\\u2028c"
    exits.say("table\nrow \x1b[31mred\r", err=True)
    assert capsys.readouterr().err == "table\nrow \\x1b[31mred\\r\n"
    exits.say_line("report: /tmp/run\nPASS/report.html")  # a message naming a path: one line, whatever the path holds
    assert capsys.readouterr().out == "report: /tmp/run\\nPASS/report.html\n"


def test_sigterm_is_a_keyboard_interrupt_that_remembers_its_signal(monkeypatch):
    monkeypatch.setattr(safe_points, "RECEIVED", [])
    assert interrupted_code() == 128 + signal.SIGINT  # Python's own Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        safe_points.handler(signal.SIGTERM, None)
    assert interrupted_code() == 128 + signal.SIGTERM


def test_a_signal_that_raised_nothing_still_ends_the_command_interrupted(monkeypatch, capsys):
    monkeypatch.setattr(safe_points, "RECEIVED", [int(signal.SIGTERM)])
    with pytest.raises(SystemExit) as ended:
        exits.leave(0, ["gate"], console=True)
    assert ended.value.code == 143 and capsys.readouterr().err == "interrupted\n"
    with pytest.raises(SystemExit) as ended:  # a failure keeps its own code
        exits.leave(1, ["gate"], console=True)
    assert ended.value.code == 1
    with pytest.raises(SystemExit) as ended:  # an in-process caller (not the console) is not judged by it
        exits.leave(0, ["gate"], console=False)
    assert ended.value.code == 0
