"""Ctrl-C and SIGTERM during a sweep (profiler/runner/interrupts.py): while entered, a
signal is recorded (the first one wins), never raised; the wake-up pipe turns readable;
``check`` raises at a safe point; the old handlers come back on exit; off the main
thread nothing is caught. (A real sweep under real signals: test_reliability.py.)"""

from __future__ import annotations

import os
import select
import signal
import threading

import pytest

from attnprof.profiler.runner.interrupts import Interrupted, Interrupts


def test_a_signal_is_recorded_not_raised_and_the_first_one_wins():
    with Interrupts() as stop:
        assert stop.poll() is None
        stop.check()  # nothing came: no exception
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.poll() == signal.SIGTERM
        with pytest.raises(Interrupted) as raised:
            stop.check()
    assert raised.value.signum == signal.SIGTERM and str(raised.value) == "SIGTERM"


def test_the_wake_up_pipe_is_readable_once_a_signal_came():
    with Interrupts() as stop:
        fd = stop.fileno()
        assert fd is not None and select.select([fd], [], [], 0)[0] == []
        signal.raise_signal(signal.SIGINT)
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert stop.poll() == signal.SIGINT
        assert select.select([fd], [], [], 0)[0] == []  # drained by poll


def test_the_old_handlers_come_back_on_exit():
    def mine(signum, frame):
        pass

    old, old_int = signal.signal(signal.SIGTERM, mine), signal.getsignal(signal.SIGINT)
    try:
        with Interrupts():
            assert signal.getsignal(signal.SIGTERM) is not mine
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is old_int
    finally:
        signal.signal(signal.SIGTERM, old)


def test_off_the_main_thread_nothing_is_caught():
    seen, handler = {}, signal.getsignal(signal.SIGINT)

    def run():
        with Interrupts() as stop:
            seen["fileno"], seen["poll"] = stop.fileno(), stop.poll()
            seen["handler"] = signal.getsignal(signal.SIGINT)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"fileno": None, "poll": None, "handler": handler}
