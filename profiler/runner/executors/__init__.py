"""Where a sweep's points run: the sweep decides what runs and writes every record; an
executor only runs points and says how each ended.

- ``local`` (``executors.local``): this machine, a warm helper per slot forking a fresh
  worker per point; one slot by default, one per visible GPU on a CUDA sweep
  (``--parallel N``), each pinned to its GPU.
- ``ray`` (``executors.ray_cluster``): a Ray cluster, each point a Ray task in a fresh worker
  process (``max_calls=1``), one GPU per point (or ``--ray-cpus-per-point`` CPUs).

Both answer ``open``, ``submit``, ``wait`` and ``close`` (``base.Executor``); the sweep
(``runner.sweep``) keeps at most ``slots`` points in flight. Ray is imported only by
``executors.ray_cluster``, and only when a sweep asks for it.
"""

from __future__ import annotations

from attnprof.profiler.runner.executors.base import EXECUTORS, Executor, Finished

__all__ = ["EXECUTORS", "Executor", "Finished", "make_executor"]


def make_executor(settings, interrupts, warn=lambda line: None) -> Executor:
    """The executor ``settings.executor`` names; nothing is started until ``open``."""
    if settings.executor == "ray":
        from attnprof.profiler.runner.executors.ray_cluster import RayExecutor

        return RayExecutor(settings, interrupts, warn)
    from attnprof.profiler.runner.executors.local import LocalExecutor

    return LocalExecutor(settings, interrupts, warn)
