"""Sweep progress (a rich live bar on a terminal, one plain line per point elsewhere)
and the end-of-sweep outcome line (the summary table: test_summary.py)."""

import io

from attnprof.profiler.records import Point, Shape
from attnprof.profiler.runner import progress as progress_module
from attnprof.profiler.runner.progress import Eta, Progress, clock


class Terminal(io.StringIO):
    def isatty(self):
        return True


def point(n=1024, variant="lsh[n_hashes=8]"):
    return Point(variant, "plain", "model", Shape(seq_len=n, d_model=64, heads=4))


def record(n=1024, status="ok", variant="lsh[n_hashes=8]", mode="plain", **extra):
    base = dict(variant=variant, mode=mode, scope="model", seq_len=n, batch=1, d_model=64, heads=4, layers=1,
                dtype="float32", ff_mult=4, ff_chunks=1, forward_only=False, status=status, point_wall_s=1.25,
                measured_peak_bytes=3 << 20, time_fwd_ms=10.0, time_bwd_ms=22.0, reason="")
    return {**base, **extra}


def test_off_a_terminal_each_point_is_one_plain_line():
    stream = io.StringIO()
    bar = Progress(3, stream=stream, already=1)
    bar.start(point(512))
    assert stream.getvalue() == ""  # nothing live when nobody watches
    bar.finish(point(512), record(512))
    bar.finish(point(1024), record(1024, status="oom", reason="out of memory at 1024"))
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[2/3] lsh[n_hashes=8] plain n=512: ok (1.2 s) peak 3.00 MiB, fwd 10 ms, bwd 22 ms")
    assert "ETA ~" in lines[0]
    assert lines[1].startswith("[3/3] lsh[n_hashes=8] plain n=1024: oom") and "out of memory at 1024" in lines[1]
    assert lines[2].startswith("elapsed ") and len(lines) == 3
    assert "\x1b" not in stream.getvalue()


def test_disabled_progress_prints_nothing_but_counts():
    stream = io.StringIO()
    bar = Progress(2, enabled=False, stream=stream)
    bar.start(point())
    bar.finish(point(), record())
    bar.close()
    assert stream.getvalue() == "" and bar.done == 1


def test_on_a_terminal_a_live_bar_shows_the_running_point_and_keeps_finished_lines():
    stream = Terminal()
    bar = Progress(2, stream=stream)
    bar.start(point(256, "sdpa"))
    bar.refresh()
    assert "running sdpa plain n=256" in stream.getvalue() and "0/2" in stream.getvalue()
    bar.finish(point(256, "sdpa"), record(256, variant="sdpa"))
    bar.start(point(512, "sdpa"))
    bar.refresh()
    assert "1/2" in stream.getvalue() and "ETA ~" in stream.getvalue()
    bar.finish(point(512, "sdpa"), record(512, variant="sdpa"))
    bar.close()
    text = stream.getvalue()
    assert "sdpa plain n=256: ok" in text and "sdpa plain n=512: ok" in text
    assert "elapsed " in text.rstrip().splitlines()[-1]  # after the bar, which is gone


def test_a_long_reason_is_cut_not_wrapped():
    stream = io.StringIO()
    bar = Progress(1, stream=stream)
    bar.finish(point(), record(status="error", reason="x" * 1000))
    assert len(stream.getvalue().splitlines()[0]) <= progress_module.LINE_CHARS


def test_eta_is_the_mean_time_per_point_of_this_run_counting_down(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])
    eta = Eta(total=10, already=4)  # four kept from before: they took no time here
    assert eta.seconds_left() is None and eta.text() == "ETA ?"
    now[0] = 110.0
    eta.finish()  # 10 s per point, 5 left
    assert eta.seconds_left() == 50.0
    now[0] = 130.0
    assert eta.seconds_left() == 30.0 and eta.text() == "ETA ~0m30s"
    assert clock(3725) == "1h02m" and clock(65) == "1m05s"


def test_the_outcome_line_prints_no_ratio_over_zero_time(capsys):
    """A crashed point or an interrupted sweep spends ~0 s inside points: no 'x39303932010.00'."""
    from types import SimpleNamespace

    from attnprof.cli import print_outcome

    def printed(compute_s, timed_s):
        summary = SimpleNamespace(wall_s=39.3, records=[], kept=0, compute_s=compute_s, timed_s=timed_s, ahead_s=0.0)
        print_outcome(SimpleNamespace(summary=summary, records=lambda: [], capacity_s=0.0))
        return capsys.readouterr().out.splitlines()[-1]

    for compute_s, timed_s in ((0.0, 0.0), (1e-9, 0.0), (0.0, 1e-9)):
        text = printed(compute_s, timed_s)
        assert " (x" not in text and "0.0 s inside the points' processes," in text, text
    text = printed(13.1, 0.0)
    assert "13.1 s inside the points' processes (x3.00)" in text and "passes (x" not in text, text


def test_a_failure_reason_is_spelled_out_on_its_one_line():
    """A reason quotes an exception's message (a plug-in's): ESC, a bell or a newline in it run nothing."""
    line = progress_module.finished_line(point(), record(status="error", reason="RuntimeError: a\x1b[2J\x07\nPASS"))
    assert line == "lsh[n_hashes=8] plain n=1024: error (1.2 s) RuntimeError: a\\x1b[2J\\x07\\nPASS"
