"""Ctrl-C and SIGTERM are raised where it is safe (profiler/safe_points.py): inside torch's
dispatch they wait for a safe point, a KeyboardInterrupt swallowed by a callback is not
lost, and a fake run interrupted at any op leaves no fake mode set behind it."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import weakref

import pytest

from attnprof.profiler import safe_points


@pytest.fixture
def installed(monkeypatch):
    """safe_points.install() for one test; the handlers and the hook put back after."""
    handlers = {sig: signal.getsignal(sig) for sig in safe_points.SIGNALS}
    hook = sys.unraisablehook
    monkeypatch.setattr(safe_points, "RECEIVED", [])
    monkeypatch.setattr(safe_points, "PENDING", False)
    safe_points.install()
    yield
    for sig, old in handlers.items():
        signal.signal(sig, old)
    sys.unraisablehook = hook


def test_outside_a_region_a_signal_is_a_keyboard_interrupt_at_once(installed):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert safe_points.received() == signal.SIGTERM and not safe_points.PENDING


def test_inside_a_region_a_signal_waits_for_its_end(installed):
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with safe_points.deferred():
            with safe_points.deferred():  # nested: the inner end is not a safe point
                signal.raise_signal(signal.SIGINT)
                reached.append("inner")
            reached.append("outer")
    assert reached == ["inner", "outer"] and safe_points.received() == signal.SIGINT
    assert not safe_points.PENDING  # raised once


def test_a_pending_signal_is_raised_as_the_next_region_starts(installed, monkeypatch):
    monkeypatch.setattr(safe_points, "PENDING", True)
    with pytest.raises(KeyboardInterrupt):
        with safe_points.deferred():
            pytest.fail("the region ran although a signal was pending")


def test_a_keyboard_interrupt_swallowed_by_a_callback_stays_pending(installed):
    class Thing:
        pass

    thing = Thing()
    ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGTERM))  # the handler raises in the callback
    del thing
    gc.collect()
    assert ref() is None and safe_points.PENDING  # "Exception ignored in ..." would have lost it
    with pytest.raises(KeyboardInterrupt):
        safe_points.check()


def test_a_region_takes_pythons_own_sigint_and_gives_it_back(monkeypatch):
    monkeypatch.setattr(safe_points, "PENDING", False)
    monkeypatch.setattr(safe_points, "RECEIVED", [])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with safe_points.deferred():
                assert signal.getsignal(signal.SIGINT) is safe_points.handler
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


# A fake run interrupted from inside torch's own dispatch bookkeeping: the signal comes right
# after FakeTensorMode.__enter__ set the mode (the CI abort: "trying to set the current
# FakeTensorMode, but one already exists", SIGABRT). Then at other ops, backward included.
# It must end as one KeyboardInterrupt, no fake mode left set, and the same process must
# predict the point afterwards exactly as before.
INTERRUPTED_FAKE_RUN = textwrap.dedent("""
    import signal, sys, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from attnprof.profiler import safe_points
    from attnprof.profiler.measure.drive import trace_point
    from attnprof.profiler.records import Point, Shape

    safe_points.install()
    point = Point("full", "checkpoint", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=2,
                                                         dtype="bfloat16"))
    clean = trace_point(point).peak_bytes
    original, entered, at = FakeTensorMode.__enter__, [0], [0]

    def enter(self):
        out = original(self)
        entered[0] += 1
        if entered[0] == at[0]:
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, the mode just set
        return out

    FakeTensorMode.__enter__ = enter
    at[0] = 0
    trace_point(point)
    total = entered[0]  # every entry of one run: the first is trace_point's own, the rest inside dispatch
    calls = []
    for at[0] in sorted({2, 3, total // 4, total // 2, total - 1, total}):
        entered[0] = 0
        try:
            peak = trace_point(point).peak_bytes
        except KeyboardInterrupt:
            peak = None
        assert torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None
        calls.append((at[0], peak))
    FakeTensorMode.__enter__ = original
    assert trace_point(point).peak_bytes == clean
    print(total, calls)
""")


@pytest.mark.slow
def test_a_fake_run_interrupted_inside_dispatch_ends_cleanly():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_FAKE_RUN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    total, calls = done.stdout.split(" ", 1)
    runs = eval(calls)  # [(the entry the signal came at, the peak or None)], printed by our own script
    assert int(total) > 10 and len(runs) >= 4, done.stdout
    assert all(peak is None for at, peak in runs), runs  # each run ended as one KeyboardInterrupt


def test_a_region_that_ends_in_another_error_after_a_signal_ends_in_the_interrupt(installed):
    """The signal is the caller's answer: a KeyboardInterrupt in place of (chained to) the other
    error, and nothing left pending for an unrelated call afterwards."""
    with pytest.raises(KeyboardInterrupt) as raised:
        with safe_points.deferred():
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("a shape error")
    assert isinstance(raised.value.__context__, ValueError)
    assert not safe_points.PENDING and safe_points.DEPTH == 0
    with safe_points.deferred():  # the next call runs
        pass
    with pytest.raises(ValueError):  # no signal: the error itself
        with safe_points.deferred():
            raise ValueError("a shape error")


def test_only_the_main_thread_raises_a_pending_signal(installed, monkeypatch):
    import threading

    monkeypatch.setattr(safe_points, "PENDING", True)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(safe_points.check()))
    worker.start()
    worker.join()
    assert seen == [None] and safe_points.PENDING
    with pytest.raises(KeyboardInterrupt):
        safe_points.check()
