"""The local executor: points on this machine, each in a fresh worker forked from a warm
helper (``isolation.PointRunner``), one helper per slot.

One slot by default, as a sweep has always run. On ``--device cuda`` one slot per
visible GPU (``--parallel N`` for fewer): slot i's helper gets ``CUDA_VISIBLE_DEVICES``
set to the i-th visible GPU, so its workers see that GPU alone, as ``cuda``, and the
point's memory limit (unless ``--mem-limit`` was given) is that GPU's memory. On a CPU,
parallel points share the cores, the caches and the memory bandwidth: ``--parallel N``
is allowed there (tests use it) with a warning, and each point gets cores/N threads.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Optional

from attnprof.profiler.forks import usable_cores
from attnprof.profiler.records import Point
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.executors.base import Executor, Finished
from attnprof.profiler.runner.interrupts import Interrupts
from attnprof.profiler.runner.isolation import PointRunner, wait_for


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (indexes or UUIDs)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    from attnprof.profiler.gpumeasure.devices import device_count  # never torch.cuda here: this process forks

    return [str(i) for i in range(device_count())]


def check_parallel(settings) -> None:
    """``--parallel``'s refusals (SweepError), made before the banner (api.sweep) and again
    when the slots are planned."""
    n = settings.parallel
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise SweepError(f"--parallel must be a positive number of points, got {n!r}")
    if settings.device.startswith("cuda:") and n not in (None, 1):
        raise SweepError(f"--parallel {n} needs --device cuda (every visible GPU), not {settings.device}")
    if settings.device == "cuda" and n is not None and n > 1 and n > len(visible_gpus()):
        raise SweepError(f"--parallel {n}: only {len(visible_gpus())} GPU(s) are visible, and a point needs one of "
                         f"its own")


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, settings, interrupts: Interrupts, warn: Callable[[str], None] = lambda line: None):
        self.settings, self.interrupts, self.warn = settings, interrupts, warn
        self.lanes = self._plan_slots()  # per slot: (helper env, child settings overrides, what runs there)
        self.slots = len(self.lanes)
        self.runners: list[PointRunner] = []
        self.points: dict[int, Point] = {}  # slot -> its point in flight
        self.early: list[Finished] = []  # points that could not even start
        self.host = socket.gethostname()
        self.noted: set = set()  # what helpers' notes were about, once said

    def _plan_slots(self) -> list[tuple[dict, dict, dict]]:
        s = self.settings
        n = s.parallel
        check_parallel(s)
        if s.device.startswith("cuda:"):
            return [({}, {}, {"device": s.device})]
        if s.device == "cuda":
            gpus = visible_gpus()
            n = n if n is not None else max(1, len(gpus))
            if n == 1:
                return [({}, {}, {"device": "cuda"})]
            return [self._gpu_slot(i, gpus[i]) for i in range(n)]
        n = n or 1
        cores = usable_cores()
        if n > cores:
            self.warn(f"warning: --parallel {n} lowered to {cores}: this machine has {cores} usable core(s), "
                      f"and each point needs one")
            n = cores
        return self._cpu_lanes(n)

    def _cpu_lanes(self, n: int) -> list[tuple[dict, dict, dict]]:
        """n CPU slots: the cores split between them (one slot: torch's own thread count)."""
        if n == 1:
            return [({}, {}, {"device": "cpu"})]
        threads = self.settings.threads or max(1, usable_cores() // n)
        return [({}, {"threads": threads}, {"device": "cpu", "threads": threads}) for _ in range(n)]

    def _gpu_slot(self, index: int, entry: str) -> tuple[dict, dict, dict]:
        from attnprof.profiler.measure.host import default_memory_limit_bytes, device_environment

        env = {"CUDA_VISIBLE_DEVICES": entry, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
        name = device_environment(f"cuda:{index}").get("device_name") or ""
        overrides = {"device": "cuda", "device_name": name}
        if self.settings.mem_limit_from_device:
            overrides["mem_limit_bytes"] = default_memory_limit_bytes(f"cuda:{index}")
        return env, overrides, {"device": "cuda", "cuda_visible_devices": entry, "device_name": name,
                                "mem_limit_bytes": overrides.get("mem_limit_bytes", self.settings.mem_limit_bytes)}

    # --- the executor -------------------------------------------------------------------
    def open(self, points: Optional[int] = None) -> None:
        if points is not None and 0 < points < self.slots:  # a helper per point at most
            if self.settings.parallel and self.settings.parallel > points:
                self.warn(f"warning: --parallel {self.settings.parallel} lowered to {points}: "
                          f"only {points} point(s) to run")
            cpu = self.settings.device == "cpu"
            self.lanes, self.slots = (self._cpu_lanes(points) if cpu else self.lanes[:points]), points
        if self.slots > 1 and self.settings.device == "cpu":  # said once, of the slots that will run
            self.warn(f"warning: --parallel {self.slots} on a CPU: the points share its cores, caches and memory "
                      f"bandwidth, so their timings disturb each other (the tensor-tracker peaks stay exact)")
        self.runners = [PointRunner(self.interrupts, env, self.note_once) for env, _, _ in self.lanes]
        if self.slots > 1:  # every helper imports torch at once, rather than one after the other
            for runner in self.runners:
                runner.spawn()
            for runner in self.runners:
                runner.await_ready()

    def note_once(self, line: str) -> None:
        """A helper's note, said once for the run however many helpers send it: keyed by what it
        is about (its text before the first ':'), since helpers name their own figures after it
        (each its own thread count)."""
        topic = line.split(":", 1)[0]
        if topic not in self.noted:
            self.noted.add(topic)
            self.warn(f"warning: {line}")

    def free(self) -> list[int]:
        return [i for i in range(self.slots) if i not in self.points]

    def submit(self, point: Point, child_settings: dict) -> None:
        slot = self.free()[0]
        result = self.runners[slot].begin(point, {**child_settings, **self.lanes[slot][1]})
        if result is None:
            self.points[slot] = point
        else:
            self.early.append(Finished(point, self._annotate(slot, result)))

    def busy(self) -> int:
        return len(self.points) + len(self.early)

    def wait(self) -> list[Finished]:
        while not self.early:
            running = [(slot, self.runners[slot]) for slot in sorted(self.points)]
            watched = [item for _, runner in running for item in runner.watched()]
            ready = wait_for(watched, min(runner.deadline() for _, runner in running), self.interrupts)
            for slot, runner in running:
                result = runner.advance(ready)
                if result is not None:
                    self.early.append(Finished(self.points.pop(slot), self._annotate(slot, result)))
        done, self.early = self.early, []
        return done

    def _annotate(self, slot: int, result: dict) -> dict:
        """Where a point that left no record of its own ran: this host, the slot's device."""
        if "variant" not in result:
            result = {**result, "host": self.host}
            name = self.lanes[slot][1].get("device_name")
            if name:
                result["device_name"] = name
        return result

    def close(self) -> None:
        for runner in self.runners:
            runner.close()
        self.points.clear()

    def describe(self) -> dict:
        return {"executor": self.name, "slots": self.slots,
                "nodes": [{"host": self.host, "cpus": os.cpu_count(), "slots": [lane[2] for lane in self.lanes]}]}

    def default_device_name(self) -> str:
        names = {lane[1].get("device_name") for lane in self.lanes if lane[1].get("device_name")}
        return names.pop() if len(names) == 1 else ("" if names else self.settings.device_name)
