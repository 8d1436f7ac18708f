"""Progress of a sweep on stderr, so a user knows what runs and how long is left.

On a terminal: a live ``rich`` bar (points done/total, elapsed, ETA, the running point)
with one line per finished point printed above it. Anywhere else (a log file, CI, a
pipe): one plain line per finished point, nothing else, so logs stay greppable.
The sweep calls ``start(point)``, ``finish(point, record)`` and ``close()``.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from attnprof.profiler.units import fmt_bytes, fmt_ms, printable

LINE_CHARS = 240  # a finished point's line is cut here: a long reason must not flood a log


def clock(seconds: float) -> str:
    """65 -> '1m05s'; 3725 -> '1h02m'."""
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def point_label(point) -> str:
    return f"{point.variant} {point.mode} n={point.shape.seq_len}"


def finished_line(point, record: dict) -> str:
    """'sdpa plain n=1024: ok (1.2 s) peak 11.54 MiB, fwd 32 ms, bwd 41 ms' (a pass not timed: '-')."""
    status = record.get("status", "?")
    detail = record.get("reason", "") if status != "ok" else (
        f"peak {fmt_bytes(record.get('measured_peak_bytes'))}, "
        f"fwd {fmt_ms(record.get('time_fwd_ms'))}, bwd {fmt_ms(record.get('time_bwd_ms'))}")
    # a reason quotes an exception's message (a plug-in's, a library's): spelled out, one line
    return printable(f"{point_label(point)}: {status} ({record.get('point_wall_s') or 0:.1f} s) {detail}")


class Eta:
    """Seconds left: the points the sweep expects a time for (``expect``: the time model's
    estimate before a series has measured points, then its measured points' extrapolation)
    at that time, every other point at this invocation's mean time per point (points kept
    by --resume took no time here, so they do not count)."""

    def __init__(self, total: int, already: int = 0):
        self.total, self.done, self.finished_here = total, already, 0
        self.started = self.last = time.perf_counter()
        self.expected: dict = {}  # point key -> seconds it is expected to take

    def expect(self, key, seconds: Optional[float]) -> None:
        if seconds is None:
            self.expected.pop(key, None)
        else:
            self.expected[key] = max(0.0, float(seconds))

    def finish(self, key=None) -> None:
        self.done += 1
        self.finished_here += 1
        self.last = time.perf_counter()
        self.expected.pop(key, None)

    def seconds_left(self) -> Optional[float]:
        """None until a point has finished or has an expected time; counts down between points."""
        known_s, known = sum(self.expected.values()), len(self.expected)
        if self.finished_here:
            per_point_s = (self.last - self.started) / self.finished_here
        elif known:
            per_point_s = known_s / known
        else:
            return None
        unknown = max(0, self.total - self.done - known)
        return max(0.0, known_s + per_point_s * unknown - (time.perf_counter() - self.last))

    def text(self) -> str:
        left = self.seconds_left()
        return "ETA ?" if left is None else f"ETA ~{clock(left)}"

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


class Progress:
    """What the sweep reports to: a live bar on a terminal, plain lines elsewhere."""

    def __init__(self, total: int, enabled: bool = True, already: int = 0, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.eta = Eta(total, already)
        self._live = _LiveBar(self.stream, self.eta) if enabled and self.tty else None

    @property
    def done(self) -> int:
        return self.eta.done

    def start(self, point) -> None:
        if self._live:
            self._live.running(point_label(point))

    def refresh(self) -> None:
        """Redraw the live bar now (rich redraws it 4 times a second by itself); off a
        terminal there is nothing to redraw."""
        if self._live:
            self._live.bar.refresh()

    def expect(self, point, seconds: Optional[float]) -> None:
        """The time ``point`` is expected to take (None: no longer known)."""
        self.eta.expect(point.key(), seconds)

    def finish(self, point, record: dict) -> None:
        self.eta.finish(point.key())
        if not self.enabled:
            return
        line = finished_line(point, record)
        if self._live:
            self._live.finished(line, record.get("status") == "ok")
        else:
            self.stream.write(f"[{self.done}/{self.total}] {line}  {self.eta.text()}"[:LINE_CHARS] + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._live:
            self._live.stop()
            self._live = None
        if self.enabled:
            self.stream.write(f"elapsed {clock(self.eta.elapsed_s())}\n")
            self.stream.flush()


class _LiveBar:
    """rich's Progress on the terminal (imported only here: a log needs no rich)."""

    def __init__(self, stream, eta: Eta):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, \
            TextColumn, TimeElapsedColumn
        from rich.text import Text

        class EtaColumn(ProgressColumn):
            def render(self, task) -> Text:
                return Text(eta.text(), style="progress.remaining")

        self.console = Console(file=stream, highlight=False)
        self.bar = Progress(SpinnerColumn(), BarColumn(bar_width=24), MofNCompleteColumn(), TimeElapsedColumn(),
                            EtaColumn(), TextColumn("{task.description}"), console=self.console,
                            refresh_per_second=4, transient=True, redirect_stdout=False, redirect_stderr=False)
        self.task = self.bar.add_task("starting", total=eta.total, completed=eta.done)
        self.bar.start()

    def running(self, label: str) -> None:
        self.bar.update(self.task, description=f"running {label}")

    def finished(self, line: str, ok: bool) -> None:
        from rich.text import Text

        self.bar.advance(self.task)
        self.console.print(Text(line[:LINE_CHARS], style="" if ok else "yellow"), overflow="ellipsis",
                           no_wrap=True, crop=True)

    def stop(self) -> None:
        self.bar.stop()
