"""Progress of a sweep on stderr: a bar with the current point, and an ETA."""

from __future__ import annotations

import sys
import time

from attnprof.profiler.units import fmt_bytes


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """One line per finished point; on a terminal, the running point is shown live."""

    def __init__(self, total: int, enabled: bool = True, already: int = 0, stream=None):
        self.total, self.done, self.enabled = total, already, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.perf_counter()
        self.finished_here = 0

    def _bar(self) -> str:
        width = 20
        filled = int(width * self.done / max(self.total, 1))
        return "[" + "#" * filled + "." * (width - filled) + f"] {self.done}/{self.total}"

    def _eta(self) -> str:
        if not self.finished_here:
            return "ETA ?"
        per_point = (time.perf_counter() - self.started) / self.finished_here
        return f"ETA ~{_clock(per_point * (self.total - self.done))}"

    def start(self, point) -> None:
        if self.enabled and self.tty:
            label = f"{point.variant} {point.mode} n={point.shape.seq_len}"
            self.stream.write(f"\r{self._bar()} running {label} ... {self._eta()}\x1b[K")
            self.stream.flush()

    def finish(self, point, record: dict) -> None:
        self.done += 1
        self.finished_here += 1
        if not self.enabled:
            return
        status = record.get("status", "?")
        detail = record.get("reason", "") if status != "ok" else (
            f"peak {fmt_bytes(record.get('measured_peak_bytes'))}, "
            f"fwd {record.get('time_fwd_ms') or 0:.1f} ms, bwd {record.get('time_bwd_ms') or 0:.1f} ms")
        line = (f"{self._bar()} {point.variant} {point.mode} n={point.shape.seq_len}: {status} "
                f"({record.get('point_wall_s') or 0:.1f} s) {detail}  {self._eta()}")
        self.stream.write(("\r" if self.tty else "") + line[:240] + ("\x1b[K" if self.tty else "") + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write(f"elapsed {_clock(time.perf_counter() - self.started)}\n")
            self.stream.flush()
