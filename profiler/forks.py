"""Worker processes forked from a process that may have run real torch ops.

Predictions fork workers from a warm process (torch imported, nothing to re-import). A
small point is predicted by a real CPU run (measure/accounting.small_point), and a real
op on several threads starts OpenMP's thread pool (GNU libgomp, MKL's batched GEMM on
top of it). The pool does not survive fork: a child's first parallel region then waits
for threads that do not exist, forever (measured: a bmm in gomp_team_barrier_wait_end).
So every forked worker runs single-threaded, set before it runs anything
(tests/profiler/measure/test_small_points.py::test_small_points_in_forked_workers_do_not_hang).
"""

from __future__ import annotations

import multiprocessing as mp


def single_threaded() -> None:
    """Initializer of a forked worker: one intra-op thread (see the module docstring)."""
    import torch

    torch.set_num_threads(1)


def fork_pool(workers: int):
    """A multiprocessing Pool of forked, single-threaded workers."""
    return mp.get_context("fork").Pool(workers, initializer=single_threaded)
