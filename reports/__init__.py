"""Comparison reports of a run folder: one self-contained HTML page and PNG charts.

``attnprof.reports.render.render_report(run_dir)`` is the entry point. The modules are
small and single-purpose: ``data`` (load, check and tidy a run), ``builtins`` (the only
labels a report resolves: built-in variants, never plug-in code), ``palette`` (colours),
``scaling`` (fitted slopes), ``capacity`` (longest length that fits a memory budget, or a
named GPU by the GPU memory model), ``charts`` (PNGs), ``diff`` (against a baseline run,
judged by ``profiler.gate.verdict``), ``time_accuracy`` (the time model against measured
times, shared with scripts/bench_time_model.py), ``tables`` and ``page`` (HTML),
``mplconfig`` (a writable matplotlib folder when HOME is read-only). Numbers print through
``profiler.units``.
"""

from attnprof.reports.mplconfig import ensure_config_dir

ensure_config_dir()  # before any module of the package imports matplotlib
