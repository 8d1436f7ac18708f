"""A CUDA sweep's predictions, made before any point is measured (``predict_ahead``).

Each worker of a sweep predicts its point before measuring it (worker.measure_point). On a
CUDA build the warm helper cannot warm the fake-tensor machinery up (runner/preload.py: it
started the CUDA driver on the H200), so a worker would pay for those imports and the trace
while the GPU waits, and a GPU machine's cores sit idle meanwhile. Predicting every point
first, over the cores, leaves each prediction in the cache (predict/cache.py) for its worker.
"""

from __future__ import annotations

import time

from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point
from attnprof.scenarios.plan import shape_problem

AHEAD_S = 60.0  # predict_ahead's deadline: a point left unpredicted then is predicted by its worker


def _predict_one(point: Point) -> bool:
    try:
        predict(point)
    except Exception:  # noqa: BLE001 - the point's worker meets it again and records it
        return False
    return True


def predict_ahead(plan: list[list[Point]], done: dict, settings) -> float:
    """A sweep's ``predict_points`` of the points not ``done``: on the local executor on a CUDA
    device only, and only where the prediction cache keeps what it predicts (its workers read
    it there; else each would trace its point again), seconds taken; 0 where nothing ran."""
    from attnprof.profiler.predict import cache

    if not (str(settings.device).startswith("cuda") and settings.executor == "local"):
        return 0.0
    if not cache.is_enabled() or not cache.check_folder():  # its one warning was said before the banner
        return 0.0
    return predict_points([p for s in plan for p in s if p.key() not in done], settings.device)


def predict_points(points: list[Point], device: str) -> float:
    """Predict ``points`` as ``device`` runs them, over this machine's cores, before any is
    measured (seconds taken). Each worker then reads its prediction from the cache
    (predict/cache.py) instead of tracing it while the GPU waits: on a CUDA build a worker pays
    for the fake-tensor imports itself (runner/preload.py), and a GPU machine's cores are
    otherwise idle. Not on a CPU sweep, where the points' own cores would do it anyway. At most
    AHEAD_S: what is left then, its worker predicts. Built-in variants only: a plug-in's code
    runs in its point's own process (``within`` may run these here, in the sweep's process)."""
    from attnprof.profiler.predict.pool import within
    from attnprof.scenarios.variants.catalog import is_builtin_label

    started = time.perf_counter()
    within(_predict_one, [(on_device(p, device),) for p in points
                          if is_builtin_label(p.variant) and not shape_problem(p)], AHEAD_S)
    return time.perf_counter() - started
