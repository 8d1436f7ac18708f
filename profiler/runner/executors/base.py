"""What every executor answers to, and the names of the executors."""

from __future__ import annotations

from typing import Optional

from dataclasses import dataclass

from attnprof.profiler.records import Point

EXECUTORS = ("local", "ray")


@dataclass
class Finished:
    """A point that is over: the worker's record (a dict with "variant"), or
    ``{"status", "reason"}`` (timeout, crashed) with whatever is known of where it ran
    (``host``, ``worker_pid``, ``device_name``)."""

    point: Point
    result: dict


class Executor:
    """Runs points and says how each ended; never writes a record (the sweep does).

    ``open()`` starts or connects (SweepError when it cannot); ``slots`` is then how
    many points may run at once; ``submit`` starts a point (never blocks on it); ``wait``
    blocks until at least one point is over, or raises ``Interrupted`` as soon as a
    SIGINT/SIGTERM came; ``close`` stops every point still running (killed, their
    processes gone) and releases what ``open`` took. ``describe`` is the manifest's
    ``cluster`` section: the executor, its slots, the nodes and devices it runs on.
    """

    name = "?"
    slots = 1

    def open(self, points: Optional[int] = None) -> None:
        """Start what runs points (helpers, a cluster connection); ``points``: how many this
        run has left, so that no more helpers start than there are points."""
        raise NotImplementedError

    def submit(self, point: Point, child_settings: dict) -> None:
        raise NotImplementedError

    def busy(self) -> int:
        """Points in flight."""
        raise NotImplementedError

    def wait(self) -> list[Finished]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"executor": self.name, "slots": self.slots}

    def default_device_name(self) -> str:
        """The device name of records the sweep writes itself (skipped points); "" when
        the points run on devices the driver cannot name."""
        return ""
