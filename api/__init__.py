"""attnprof as a library: ``predict``, ``sweep``, ``report`` and ``gate`` with typed keywords.

The command line (``cli.py``) is glue over these four functions, so a notebook or a
script gets exactly what ``attnprof ...`` does, without parsing its output::

    from attnprof import api
    run = api.sweep(variants=["sdpa", "lsh"], max_len=4096, out="runs/x")
    print(run.report_path)

Flags and keywords mean the same: keywords given (not None) override the scenario
file's values, which override ``Scenario``'s defaults (``build_scenario``). The scenario's
keywords are one list, ``attnprof.scenarios.fields.FIELDS`` (type, unit, default, help);
``overrides.overridable`` gives every function that takes them the same ones. Every
mistake raises a ``attnprof.errors.UserError`` subclass whose message is one line.
Nothing here prints, except a sweep's progress on stderr (``progress=False``) and the
notes passed to ``log``. torch, pandas and matplotlib are imported only when needed.

The modules: ``overrides`` (a scenario from keywords), ``predicting`` (predict, the GPU
table, calibrate), ``sweeping`` (sweep), ``capacity`` (the report's capacity predictions
after a sweep), ``reporting`` (report, gate), ``exporting`` (export: CSV, Parquet,
JSON, github-action-benchmark).
"""

from attnprof.api.capacity import CAPACITY_SECONDS, capacity_for_report
from attnprof.api.exporting import FORMATS as EXPORT_FORMATS, Exported, export
from attnprof.api.overrides import build_scenario
from attnprof.api.predicting import (PREDICT_LEN, CalibrationRun, Predictions, calibrate, default_memory_limit,
                                     gpu_table, predict)
from attnprof.api.reporting import REPORT_SECONDS, GateRun, gate, report
from attnprof.api.sweeping import DEFAULT_SCENARIO, SweepRun, sweep
from attnprof.api.timelines import compare_timelines
from attnprof.arguments import ArgumentError, UsageProblem, checked, refuse_ignored
from attnprof.scenarios.scenario import Scenario, load_scenario

__all__ = ["ArgumentError", "CAPACITY_SECONDS", "CalibrationRun", "DEFAULT_SCENARIO", "EXPORT_FORMATS", "Exported",
           "GateRun", "PREDICT_LEN", "Predictions", "REPORT_SECONDS", "Scenario", "SweepRun", "UsageProblem",
           "build_scenario", "calibrate", "capacity_for_report", "checked", "compare_timelines", "default_memory_limit",
           "export", "gate", "gpu_table", "load_scenario", "predict", "refuse_ignored", "report", "sweep"]
