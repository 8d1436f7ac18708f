"""The Ray executor: each point a Ray task in a fresh worker process, one GPU (or
``--ray-cpus-per-point`` CPUs) per point, across a cluster's nodes.

- **Where**: ``--ray-address`` (``HOST:PORT`` of a head node, ``ray://...``, ``auto``),
  else ``RAY_ADDRESS``, else the cluster ``ray start --head`` recorded on this machine,
  else a new local cluster on the loopback interface, stopped again when the sweep ends.
  An address that does not answer is one line, never a hang: a TCP probe first
  (ray_address.py, after the address's syntax), then ``ray.init`` bounded by ``CONNECT_TIMEOUT_S``.
- **Isolation**: ``max_calls=1`` (a worker process runs one point, then exits) and
  ``max_retries=0`` (a point that killed its worker is not run again): an OOM, a
  segfault or a SIGKILL takes that worker down and makes its point ``crashed``.
- **Timeouts**: a task first reports that it started (a streaming generator's first
  item, once torch is imported and warm, as in the local helper), with its host, pid
  and device; ``--point-timeout``
  counts from then, so time queued for a free GPU never counts. Past it the task is
  cancelled with ``force=True`` (its worker killed): ``timeout``.
- **Memory limit**: without ``--mem-limit`` each task computes it on its own node, from
  its own device (the GPU Ray gave it, or that node's RAM).
- **Heterogeneous clusters**: ``gpu_type`` restricts the tasks to GPUs of one
  accelerator type (Ray's ``accelerator_type:<TYPE>`` node resource).

``import ray`` happens in ``import_ray`` only: ``attnprof --help`` never pays for it.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from attnprof.profiler.records import Point
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.executors.base import Executor, Finished
from attnprof.profiler.runner.executors.ray_address import probe
from attnprof.profiler.runner.interrupts import SIGNALS, Interrupts

EXTRA_HINT = "pip install 'attnprof[ray]'"
CONNECT_TIMEOUT_S = 30.0  # ray.init against a cluster that accepts connections
POLL_S = 0.2  # ray.wait in slices: a Ctrl-C or SIGTERM is seen within this
ACCELERATOR = "accelerator_type:"  # Ray's node resource naming a node's GPU type
LOCAL_OBJECT_STORE_BYTES = 256 << 20  # a local cluster moves records of a few KiB: no need for 30% of RAM


def import_ray():
    """The ray module, or a one-line SweepError (exit 2) naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise SweepError(f"--executor ray needs Ray, which is not installed: {EXTRA_HINT}") from None
    return ray


def require_ray() -> None:
    """Fail early, before a run folder is created, when Ray is missing."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None (a test hiding it)
        found = False
    if not found:
        raise SweepError(f"--executor ray needs Ray, which is not installed: {EXTRA_HINT}")


# --- the connection -----------------------------------------------------------------------------
def _probe(address: str) -> None:
    """The address's syntax, then a TCP connect (ray_address.probe): one line, never a hang."""
    probe(address)


class RaySession:
    """A connection to a Ray cluster, made once per sweep (or per ``--gpu-types`` run):
    ``owned`` when this process started the cluster (stopped again by ``close``) or
    connected itself (disconnected by ``close``); a caller's own ``ray.init`` is left be."""

    def __init__(self, ray, owned: bool, started_local: bool, address: str):
        self.ray, self.owned, self.started_local, self.address = ray, owned, started_local, address

    @classmethod
    def connect(cls, address: Optional[str], interrupts: Optional[Interrupts] = None) -> "RaySession":
        ray = import_ray()
        if ray.is_initialized():
            return cls(ray, owned=False, started_local=False, address="(this process's ray.init)")
        address = address or os.environ.get("RAY_ADDRESS") or None
        if address is None:
            recorded = _recorded_cluster(ray)
            if recorded:
                address = recorded
        if address is not None:
            _probe(address)
            _bounded(lambda: ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False),
                     CONNECT_TIMEOUT_S, address, interrupts)
            return cls(ray, owned=True, started_local=False, address=address)
        _start_local(ray)
        return cls(ray, owned=True, started_local=True, address=ray.get_runtime_context().gcs_address)

    def close(self) -> None:
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()  # a local cluster we started stops with it
        self.owned = False

    def nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]


def _recorded_cluster(ray) -> Optional[str]:
    """The address ``ray start --head`` recorded on this machine, if that cluster answers."""
    try:
        from ray._private.utils import read_ray_address

        address = read_ray_address()
    except Exception:  # noqa: BLE001 - a private helper: without it, start a local cluster
        return None
    if not address:
        return None
    try:
        _probe(address)
    except SweepError:
        return None  # a stale record of a stopped cluster
    return address


def _bounded(connect: Callable[[], object], timeout_s: float, address: str, interrupts: Optional[Interrupts]) -> None:
    """``connect()`` in a thread, given ``timeout_s``: a cluster that accepts the TCP
    connection but never answers as Ray would otherwise hang the sweep for good.
    (Off the main thread, ``ray.init`` also leaves our SIGTERM handler in place.)"""
    box: dict = {}

    def run():
        try:
            connect()
        except BaseException as exc:  # noqa: BLE001 - reported below, in one line
            box["error"] = exc

    thread = threading.Thread(target=run, name="attnprof-ray-connect", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(POLL_S)
        if interrupts is not None:
            interrupts.check()
    if thread.is_alive():
        raise SweepError(f"no answer from the Ray cluster at {address} within {timeout_s:.0f} s "
                         f"(is a Ray head node listening there?)")
    if "error" in box:
        exc = box["error"]
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise SweepError(f"cannot connect to the Ray cluster at {address}: {text}")


def _start_local(ray) -> None:
    """A private cluster of this machine's CPUs and GPUs, on the loopback interface only
    (nothing listens on the network), without the dashboard; ``ray.shutdown`` stops it."""
    from ray._private import ray_constants

    loopback = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # ray's switch: node address 127.0.0.1
    handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                 object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    except Exception as exc:  # noqa: BLE001
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise SweepError(f"cannot start a local Ray cluster: {text}") from None
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = loopback
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():  # ray.init installs its own SIGTERM handler
                if handler is not None:
                    signal.signal(sig, handler)


# --- what the cluster has -----------------------------------------------------------------------
def gpu_types_of(nodes: list[dict]) -> dict[str, int]:
    """{accelerator type: GPUs of that type} over the nodes (Ray detects the type of NVIDIA GPUs)."""
    out: dict[str, int] = {}
    for node in nodes:
        res = node.get("Resources", {})
        for key in res:
            if key.startswith(ACCELERATOR):
                out[key[len(ACCELERATOR):]] = out.get(key[len(ACCELERATOR):], 0) + int(res.get("GPU", 0))
    return out


def _node_slots(resources: dict, gpu: bool, cpus_per_point: float, gpu_type: str) -> int:
    cpus = int(resources.get("CPU", 0) // cpus_per_point) if cpus_per_point else 0
    if not gpu:
        return cpus
    if gpu_type and f"{ACCELERATOR}{gpu_type}" not in resources:
        return 0
    return min(int(resources.get("GPU", 0)), cpus)


def describe_nodes(nodes: list[dict]) -> list[dict]:
    out = []
    for node in nodes:
        res = node.get("Resources", {})
        out.append({"host": node.get("NodeManagerHostname", ""), "address": node.get("NodeManagerAddress", ""),
                    "node_id": node.get("NodeID", ""), "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0),
                    "gpu_types": sorted(k[len(ACCELERATOR):] for k in res if k.startswith(ACCELERATOR)),
                    "memory_bytes": int(res.get("memory", 0))})
    return out


# --- the task -----------------------------------------------------------------------------------
def point_task(point: Point, settings: dict):
    """Runs in a Ray worker (a fresh process): say where it runs, then measure the point."""
    from attnprof.profiler.gpumeasure.devices import prefer_pci_bus_order

    prefer_pci_bus_order()  # first: device numbering is fixed when CUDA starts, so before any torch work

    from attnprof import __version__
    from attnprof.profiler.runner import worker
    from attnprof.profiler.runner.failures import row_of
    from attnprof.profiler.runner.preload import warm_up

    warm_up()  # torch and the fake-tensor machinery, as the local helper does: not part of the point's time

    name = settings.get("device_name") or worker.local_device_name(settings["device"])
    settings = {**settings, "device_name": name}
    yield {"started": True, "host": socket.gethostname(), "worker_pid": os.getpid(), "device_name": name,
           "attnprof_version": __version__}
    yield row_of(worker.measure_point(point, settings))  # a failure's traceback too (runner/failures.py)


@dataclass
class _Task:
    point: Point
    submitted: float
    started: Optional[float] = None
    where: dict = field(default_factory=dict)  # host, worker_pid, device_name once it started


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, settings, interrupts: Interrupts, warn: Callable[[str], None] = lambda line: None):
        self.settings, self.interrupts, self.warn = settings, interrupts, warn
        self.session: Optional[RaySession] = None
        self.tasks: dict = {}  # ObjectRefGenerator -> _Task
        self.early: list[Finished] = []
        self.slots = 0
        self.cluster: dict = {}
        self.names: set = set()  # device names the tasks reported
        self._warned_version = False

    def open(self, points: Optional[int] = None) -> None:
        s = self.settings
        if s.device.startswith("cuda:"):
            raise SweepError(f"--device {s.device} with --executor ray: Ray gives each point one GPU of its own; "
                             f"use --device cuda")
        self.session = RaySession.connect(s.ray_address, self.interrupts)
        ray = self.session.ray
        nodes = self.session.nodes()
        gpus = sum(int(n.get("Resources", {}).get("GPU", 0)) for n in nodes)
        if s.device == "auto":
            s.device = "cuda" if gpus else "cpu"
        gpu = s.device == "cuda"
        types = gpu_types_of(nodes)
        if s.gpu_type and s.gpu_type not in types:
            raise SweepError(f"the Ray cluster has no GPU of type {s.gpu_type}; it has "
                             f"{', '.join(f'{t} x{c}' for t, c in sorted(types.items())) or 'none'}")
        self.slots = sum(_node_slots(n.get("Resources", {}), gpu, s.ray_cpus_per_point, s.gpu_type) for n in nodes)
        if self.slots < 1:
            need = "a GPU" if gpu else f"{s.ray_cpus_per_point:g} CPU(s)"
            raise SweepError(f"no node of the Ray cluster at {self.session.address} has {need} for a point "
                             f"(--device {s.device}, --ray-cpus-per-point {s.ray_cpus_per_point:g})")
        self.cluster = {"executor": self.name, "address": self.session.address, "slots": self.slots,
                        "ray_version": ray.__version__, "started_local_cluster": self.session.started_local,
                        "nodes": describe_nodes(nodes), "gpu_types": types,
                        "resources_per_point": self._resources(gpu)}
        options = self._resources(gpu)
        if s.gpu_type:
            options["accelerator_type"] = s.gpu_type
        self.remote = ray.remote(max_calls=1, max_retries=0, retry_exceptions=False)(point_task).options(
            name="attnprof-point", **options)

    def _resources(self, gpu: bool) -> dict:
        return {"num_cpus": self.settings.ray_cpus_per_point, "num_gpus": 1 if gpu else 0}

    def submit(self, point: Point, child_settings: dict) -> None:
        s = self.settings
        child = {**child_settings, "device": "cuda" if s.device == "cuda" else "cpu", "device_name": "",
                 "threads": s.threads or (None if s.device == "cuda" else max(1, math.floor(s.ray_cpus_per_point)))}
        if s.mem_limit_from_device:
            child["mem_limit_bytes"] = None  # the task's node knows its device's memory
        self.tasks[self.remote.remote(point, child)] = _Task(point, time.monotonic())

    def busy(self) -> int:
        return len(self.tasks) + len(self.early)

    def wait(self) -> list[Finished]:
        ray = self.session.ray
        while not self.early:
            self.interrupts.check()
            pending = list(self.tasks)
            ready, _ = ray.wait(pending, num_returns=1, timeout=POLL_S, fetch_local=True)
            if ready:
                ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0, fetch_local=True)
            for gen in ready:
                self._take(gen)
            self._enforce_timeouts()
        self.interrupts.check()
        done, self.early = self.early, []
        return done

    def _take(self, gen) -> None:
        ray, task = self.session.ray, self.tasks[gen]
        try:
            value = ray.get(next(gen))
        except StopIteration:
            value = {"status": "crashed", "reason": "the Ray task ended without a record"}
        except Exception as exc:  # noqa: BLE001 - each way a task fails is its point's status
            value = self._failure(exc, task)
        if isinstance(value, dict) and value.get("started"):
            task.started = time.monotonic()
            task.where = {k: value[k] for k in ("host", "worker_pid", "device_name")}
            if value["device_name"]:
                self.names.add(value["device_name"])
            self._check_version(value.get("attnprof_version"), value.get("host"))
            return
        del self.tasks[gen]
        self.early.append(Finished(task.point, value if "variant" in value else {**task.where, **value}))

    def _failure(self, exc: BaseException, task: _Task) -> dict:
        errors = self.session.ray.exceptions
        where = (f" (pid {task.where['worker_pid']} on {task.where['host']})" if task.where else "")
        text = " ".join(str(exc).split())
        if isinstance(exc, errors.OutOfMemoryError):
            return {"status": "oom", "reason": f"Ray's memory monitor killed the worker{where}: node out of memory"}
        if isinstance(exc, errors.WorkerCrashedError):
            return {"status": "crashed", "reason": f"Ray worker died{where}: killed (SIGKILL, the kernel's OOM "
                                                   f"killer) or crashed (SIGSEGV); see the node's Ray logs"}
        if isinstance(exc, (errors.NodeDiedError, errors.LocalRayletDiedError, errors.ObjectLostError)):
            return {"status": "crashed", "reason": f"the Ray node running the point was lost{where}: {text[:200]}"}
        if isinstance(exc, errors.RayTaskError):  # our task's code raised outside measure_point: e.g. no attnprof
            from attnprof.profiler.runner.failures import TRACEBACK_KEY, failure_reason, full_traceback

            cause = getattr(exc, "cause", None) or exc  # Ray's traceback_str: the remote traceback, for RUN/logs
            return {"status": "error", "reason": f"the Ray task failed{where}: {failure_reason(cause)}",
                    TRACEBACK_KEY: getattr(exc, "traceback_str", "") or full_traceback(exc)}
        return {"status": "crashed", "reason": f"the Ray task failed{where}: {type(exc).__name__}: {text[:200]}"}

    def _check_version(self, version: Optional[str], host: Optional[str]) -> None:
        from attnprof import __version__

        if version != __version__ and not self._warned_version:
            self._warned_version = True
            self.warn(f"warning: {host} runs attnprof {version}, this driver {__version__}: install the same "
                      f"version on every node")

    def _enforce_timeouts(self) -> None:
        timeout = self.settings.point_timeout_s
        now = time.monotonic()
        for gen, task in list(self.tasks.items()):
            if task.started is not None and now - task.started >= timeout:
                self._cancel(gen)
                del self.tasks[gen]
                self.early.append(Finished(task.point, {**task.where, "status": "timeout", "reason":
                                                        f"no result within --point-timeout {timeout:g} s; "
                                                        f"Ray task cancelled, its worker killed"}))

    def _cancel(self, gen) -> None:
        try:
            self.session.ray.cancel(gen, force=True)
        except Exception:  # noqa: BLE001 - finished meanwhile, or its node is gone
            pass

    def close(self) -> None:
        if self.session is None:
            return
        for gen in list(self.tasks):
            self._cancel(gen)  # killed, not just abandoned: a hanging point must not hold its GPU
        self.tasks.clear()
        self.session.close()
        self.session = None

    def describe(self) -> dict:
        return self.cluster or {"executor": self.name}

    def default_device_name(self) -> str:
        """The one device name the tasks reported so far (so that a skipped point's record
        names the same device as its series' measured ones), else the GPU type, else ""."""
        return next(iter(self.names)) if len(self.names) == 1 else self.settings.gpu_type
