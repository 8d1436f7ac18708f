"""The child side of a sweep (profiler/runner/worker.py), run in this process: one point
measured into its record (predicted and measured peak, the timing pass), a point over
the memory limit skipped before it runs, any failure a status with a one-line reason,
and the record sent down the result pipe. (In forked workers, killed, hung and raced:
test_sweep.py, test_reliability.py.)"""

from __future__ import annotations

import multiprocessing as mp
import os
import re

import pytest
import torch

from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.profiler.runner.failures import TRACEBACK_KEY, row_of
from attnprof.profiler.runner.worker import child_main, is_oom, measure_point, memory_limit

POINT = Point("sdpa", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))


def settings(**kw) -> dict:
    return {"device": "cpu", "warmup": 0, "repeats": 2, "test_hook": "", **kw}


def test_a_point_is_predicted_measured_and_timed():
    record = measure_point(POINT, settings(repeats=3))
    assert record.status == "ok", record.reason
    assert record.measured_peak_bytes == record.predicted_peak_bytes > 0
    assert record.measured_by == "tensor-tracker" and record.rss_peak_bytes >= record.rss_baseline_bytes > 0
    assert record.repeats == 3 and len(record.time_fwd_samples_ms) == len(record.time_bwd_samples_ms) == 3
    assert record.time_fwd_ms > 0 and record.time_bwd_ms > 0 and record.tokens_per_s > 0
    assert record.flops_fwd > 0 and record.achieved_flops_per_s > 0
    assert record.worker_pid == os.getpid() and record.host and record.finished_at and record.point_wall_s > 0


def test_a_point_says_where_its_seconds_went():
    record = measure_point(POINT, settings(sent_at=1.0))  # sent at the epoch's first second: start is its age
    phases = record.point_phases_s
    assert set(phases) == {"start", "predict", "memory_pass", "timing_pass"}, phases  # no CUDA context on a CPU
    assert phases["start"] > 1e9 and all(v >= 0 for v in phases.values())
    assert "start" not in measure_point(POINT, settings()).point_phases_s  # not sent by a sweep: no start phase
    assert sum(v for k, v in phases.items() if k != "start") <= record.point_wall_s
    skipped = measure_point(POINT, settings(mem_limit_bytes=1))
    assert set(skipped.point_phases_s) == {"predict"}  # the phases it reached


def test_a_forward_only_point_times_no_backward():
    record = measure_point(Point("sdpa", "plain", "model", POINT.shape, forward_only=True), settings())
    assert record.status == "ok", record.reason
    assert record.time_bwd_samples_ms == [] and record.time_bwd_ms is None and record.time_fwd_ms > 0
    assert record.achieved_flops_per_s == pytest.approx(record.flops_fwd / (record.time_fwd_ms / 1e3))


def test_a_point_predicted_over_the_memory_limit_is_skipped_before_it_runs():
    record = measure_point(POINT, settings(mem_limit_bytes=1024, test_hook="sdpa=oom"))  # the hook never fires
    assert record.status == "skipped" and "exceeds the memory limit 1.00 KiB" in record.reason
    assert record.predicted_peak_bytes > 1024 and record.measured_peak_bytes is None and record.time_fwd_ms is None


def test_a_failure_inside_a_point_is_its_status_with_a_one_line_reason():
    record = measure_point(POINT, settings(test_hook="sdpa@64=oom"))
    assert record.status == "oom" and record.reason.startswith("MemoryError: simulated out of memory (at ")
    assert record.predicted_peak_bytes > 0 and record.point_wall_s is not None
    broken = measure_point(Point("no_such_variant", "plain", "model", POINT.shape), settings())
    assert broken.status == "error" and "\n" not in broken.reason and broken.reason


def test_an_error_keeps_its_first_line_and_where_in_attnprof_and_its_traceback_travels_with_the_row():
    record = measure_point(POINT, settings(test_hook="sdpa=error"))
    assert record.status == "error"
    assert re.fullmatch(r"RuntimeError: CUDA error: simulated initialization error "
                        r"\(at profiler/runner/worker\.py:\d+\)", record.reason), record.reason
    row = row_of(record)
    assert "Traceback (most recent call last)" in row[TRACEBACK_KEY] and "CUDA_LAUNCH_BLOCKING" in row[TRACEBACK_KEY]
    assert TRACEBACK_KEY not in PointRecord.from_dict(row).to_row()  # never a field of results.jsonl
    assert TRACEBACK_KEY not in row_of(measure_point(POINT, settings()))  # an ok point sends none


def test_out_of_memory_is_recognised_by_type_and_by_message():
    assert is_oom(MemoryError()) and is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB"))
    assert is_oom(RuntimeError("Failed to allocate 12 bytes")) and not is_oom(RuntimeError("shape mismatch"))


def test_the_memory_limit_is_the_given_one_or_else_none_on_cpu():
    assert memory_limit({"device": "cpu", "mem_limit_bytes": 123}) == 123
    assert memory_limit({"device": "cpu"}) is None


def test_the_record_goes_down_the_result_pipe_as_its_row():
    reader, writer = mp.Pipe(duplex=False)
    fd = os.dup(writer.fileno())
    writer.close()
    child_main(fd, POINT, settings(repeats=1))
    row = reader.recv()
    reader.close()
    assert PointRecord.from_dict(row).status == "ok" and row["seq_len"] == 64 and row["worker_pid"] == os.getpid()


def test_on_a_gpu_a_failed_prediction_costs_the_prediction_not_the_measurement(monkeypatch):
    """A point whose prediction fails is still measured on a GPU (its allocator stops a point that
    does not fit), with the reason saying so; on the CPU it is the point's error (the prediction
    is what keeps an oversized point from running there)."""
    from attnprof.profiler.runner import worker

    def broken(point):
        raise RuntimeError("a plug-in that breaks under fake tensors\nmore lines")

    monkeypatch.setattr(worker, "predict", broken)
    record = PointRecord(**POINT.identity(), device="cuda")
    assert worker.predict_for(POINT, "cuda:0", record) is None
    assert record.reason.startswith("measured without a prediction: RuntimeError: a plug-in that breaks")
    with pytest.raises(RuntimeError, match="plug-in"):
        worker.predict_for(POINT, "cpu", PointRecord(**POINT.identity()))
    assert worker.UNPREDICTED == "measured without a prediction"


def test_a_gpu_point_without_a_prediction_is_not_run_past_an_explicit_memory_limit(monkeypatch):
    from attnprof.profiler.runner import worker

    monkeypatch.setattr(worker, "predict", lambda point: (_ for _ in ()).throw(RuntimeError("no prediction")))
    record = measure_point(POINT, settings(device="cuda:0", mem_limit_bytes=1 << 30))
    assert record.status == "skipped" and "--mem-limit needs a prediction" in record.reason
    assert record.reason.startswith("measured without a prediction: RuntimeError: no prediction")


NO_COMPILER = r"""
import torch
from attnprof.profiler.measure.fakemode import is_real_dynamo_loaded
from attnprof.profiler.records import Point, Shape
from attnprof.profiler.runner.worker import measure_point

def peaks():
    out = []
    for mode in ("plain", "checkpoint", "reversible"):  # checkpoint's functions are wrapped by _disable_dynamo too
        shape = Shape(seq_len=64, d_model=32, heads=2, layers=2, optimizer="adamw")  # step calls graph_break
        record = measure_point(Point("sdpa", mode, "model", shape), {"device": "cpu", "warmup": 1, "repeats": 1})
        assert record.status == "ok", record.reason
        out.append(record.measured_peak_bytes)
    return out

before = peaks()
print("compiler imported:", is_real_dynamo_loaded())
import torch._dynamo
print("same peaks with it:", peaks() == before)
"""


@pytest.mark.slow
def test_measuring_a_point_imports_no_compiler_and_its_figures_do_not_depend_on_that(tmp_path):
    """A worker forked from a helper that never imported torch._dynamo (a CUDA build's) must not
    pay that import in each point (0.8-1.5 s): its passes run under fakemode.light_dynamo."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NO_COMPILER], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["compiler imported: False", "same peaks with it: True"]
