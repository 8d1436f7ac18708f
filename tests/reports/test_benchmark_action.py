"""github-action-benchmark's customSmallerIsBetter input: the schema the action reads
(src/extract.ts BenchmarkResult: name, unit, value; optional range, extra), one entry per ok
point and memory figure plus the step time, names stable and unique."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from conftest import ci_records, synthetic_record

from attnprof.profiler.records import IDENTITY_DEFAULTS
from attnprof.reports.benchmark_action import entries, point_name, to_benchmark_action

REQUIRED = {"name": str, "unit": str, "value": (int, float)}
OPTIONAL = {"range": str, "extra": str}


def rows(records) -> list[dict]:
    return [r.to_row() for r in records]


def check_schema(doc) -> None:
    assert isinstance(doc, list)
    for entry in doc:
        assert isinstance(entry, dict)
        assert set(REQUIRED) <= set(entry) <= set(REQUIRED) | set(OPTIONAL), entry
        for key, kind in {**REQUIRED, **OPTIONAL}.items():
            if key in entry:
                assert isinstance(entry[key], kind) and not isinstance(entry[key], bool), (key, entry)
        assert math.isfinite(entry["value"])


def test_the_file_matches_the_action_schema():
    recs = rows(ci_records(variants=("sdpa", "full"), modes=("plain",)))
    doc = json.loads(to_benchmark_action(recs))
    check_schema(doc)
    assert doc and len({e["name"] for e in doc}) == len(doc)


def test_one_entry_per_ok_point_and_figure_with_its_value():
    recs = rows(ci_records(variants=("full",), modes=("plain",)))  # the longest is an OOM
    ok = [r for r in recs if r["status"] == "ok"]
    doc = entries(recs)
    by_name = {e["name"]: e for e in doc}
    assert len(doc) == 3 * len(ok)  # measured peak, predicted peak, step time
    for r in ok:
        peak = by_name[f"{point_name(r)}: peak memory"]
        assert (peak["value"], peak["unit"]) == (r["measured_peak_bytes"], "bytes")
        assert by_name[f"{point_name(r)}: predicted peak memory"]["value"] == r["predicted_peak_bytes"]
        step = by_name[f"{point_name(r)}: step time"]
        assert step["unit"] == "ms" and step["value"] == r["time_fwd_ms"] + r["time_bwd_ms"]
    assert not any("n=1024" in e["name"] for e in doc)  # the OOM point has no figure


def test_gpu_figures_are_entries_too():
    r = replace(synthetic_record("sdpa", "plain", 512), device="cuda", cuda_reserved_peak_bytes=1 << 30,
                gpu="h100-sxm", gpu_allocated_peak_bytes=123, time_fwd_iqr_ms=0.01).to_row()
    names = {e["name"]: e for e in entries([r])}
    base = point_name(r)
    assert base.endswith("on cuda")
    assert names[f"{base}: reserved peak memory"]["value"] == 1 << 30
    assert names[f"{base}: GPU model h100-sxm allocated peak"]["value"] == 123
    assert names[f"{base}: step time"]["range"].startswith("IQR")


def test_the_times_in_words_are_printed_as_everywhere_else():
    """units.fmt_ms, as the gate and the report print them (was '1.235e+04 ms' for 12.3 s)."""
    r = dict(synthetic_record("sdpa", "plain", 512).to_row(), time_fwd_ms=12345.6, time_bwd_ms=23.45678)
    [step] = [e for e in entries([r]) if e["name"].endswith("step time")]
    assert step["extra"].startswith("forward 12.3 s, backward 23.5 ms,")


def test_names_are_stable_across_runs_and_carry_every_identity_field():
    alone = point_name(synthetic_record("sdpa", "plain", 512).to_row())
    among = [point_name(r) for r in rows(ci_records())]
    assert alone in among  # the same point, the same name, whatever else the run holds
    r = synthetic_record("sdpa", "plain", 512).to_row()
    variants = [dict(r, d_model=128, head_dim=32), dict(r, heads=2, head_dim=32), dict(r, layers=3),
                dict(r, dtype="bfloat16"), dict(r, ff_mult=2), dict(r, ff_chunks=4), dict(r, batch=2),
                dict(r, forward_only=True)]
    for name, default in IDENTITY_DEFAULTS.items():  # the later identity fields (issue 24), where any
        variants.append(dict(r, **{name: (not default) if isinstance(default, bool) else
                                   (default + 1 if isinstance(default, int) else default + "x")}))
    names = [point_name(v) for v in variants]
    assert alone not in names and len(set(names)) == len(names)


def test_hostile_labels_are_spelled_out_and_names_stay_unique():
    a = synthetic_record("x\ny", "plain", 256).to_row()
    b = synthetic_record("x\\ny", "plain", 256).to_row()  # prints like the first one
    doc = json.loads(to_benchmark_action([a, b]))
    check_schema(doc)
    assert all("\n" not in e["name"] for e in doc)
    assert len({e["name"] for e in doc}) == len(doc)
