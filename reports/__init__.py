"""Comparison reports of a run folder: one self-contained HTML page and PNG charts.

``attnprof.reports.render.render_report(run_dir)`` is the entry point. The modules are
small and single-purpose: ``data`` (load and tidy a run), ``units`` (how numbers read),
``palette`` (colours), ``scaling`` (fitted slopes), ``capacity`` (longest length that
fits a memory budget), ``charts`` (PNGs), ``diff`` (against a baseline run),
``tables`` and ``page`` (HTML).
"""
