"""The child side of a sweep: measure one point and send back its record.

Runs in a process forked from the sweep's warm helper (``preload``), which has already
imported torch and attnprof, so a point costs milliseconds to start and a crash, OOM
or hang takes only its own process down. Order inside a point:
  1. predict (fake tensors): the predicted peak and FLOPs; skip if over the memory limit;
  2. memory pass, alone (the tracker's overhead must not touch the timings);
  3. timing pass: warm-up, then forward and backward timed separately, repeatedly.
Neither pass imports torch._dynamo (``fakemode.light_dynamo``: ``measure_point``).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from pathlib import Path

import psutil
import torch

from attnprof.profiler.lifeline import die_with_parent
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.fakemode import light_dynamo
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.runner.estimate import add_time_fields
from attnprof.profiler.runner.failures import failure_reason, keep_traceback, row_of
from attnprof.profiler.runner.worker_stderr import DUMP_SIGNAL
from attnprof.profiler.records import Point, PointRecord
from attnprof.profiler.units import fmt_bytes
from attnprof.profiler.measure.workload import Workload, kv_repeat, scope_note


class RssSampler:
    """Peak resident set size of this process, polled every ``interval_s`` in a thread.
    Real but noisy (allocator, thread stacks): reported, never gated on."""

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.proc = psutil.Process()
        self.baseline_bytes = self.peak_bytes = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.proc.memory_info().rss)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self.proc.memory_info().rss)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    if oom_type and isinstance(exc, oom_type):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text or "failed to allocate" in text


def _base_record(point: Point, device: str, device_name: str) -> PointRecord:
    return PointRecord(**point.identity(), device=device, device_name=device_name, host=socket.gethostname(),
                       worker_pid=os.getpid())


def local_device_name(device: str) -> str:
    """The name of the device this process measures on: the GPU's (NVML first: no CUDA
    context just to ask), or the CPU model. For a worker on a node the sweep cannot see."""
    from attnprof.profiler.measure.host import device_environment

    env = device_environment(device)
    if str(device).startswith("cuda"):
        return env.get("device_name") or ""
    return env.get("cpu") or "cpu"


def memory_limit(settings: dict) -> int | None:
    """--mem-limit, or without it (``mem_limit_from_device``) this device's own memory."""
    limit = settings.get("mem_limit_bytes")
    if limit is None and settings.get("mem_limit_from_device"):
        from attnprof.profiler.measure.host import default_memory_limit_bytes

        limit = default_memory_limit_bytes(settings["device"])
    return limit


def _add_reason(record: PointRecord, text: str) -> None:
    record.reason = f"{record.reason}; {text}" if record.reason else text


def measure_point(point: Point, settings: dict) -> PointRecord:
    """Everything about one point; exceptions become a status, never escape."""
    device, device_name = settings["device"], settings.get("device_name", "")
    record = _base_record(point, device, device_name)
    started = time.perf_counter()
    sent_at = settings.get("sent_at")  # the sweep's time.time() when it sent the point: the start phase
    if isinstance(sent_at, (int, float)):
        record.point_phases_s["start"] = round(max(0.0, time.time() - sent_at), 4)
    torch.set_num_threads(settings.get("threads") or torch.get_num_threads())
    try:
        record.reason = scope_note(point)  # how the point was measured, when it needs saying
        record.kv_repeat = kv_repeat(point)  # issue 24: how K/V reached the query heads
        with phase(record, "predict"):
            pred = predict_for(point, device, record)  # issue 24: the step as this device runs it
        if pred is not None:
            record.predicted_peak_bytes = pred.peak_bytes
            record.predicted_breakdown_bytes = pred.breakdown_bytes
            record.predicted_peak_op, record.predicted_peak_pass = pred.peak_op, pred.peak_pass  # issue 24: peak split
            record.flops_fwd, record.flops_bwd = pred.flops_fwd, pred.flops_bwd
            add_time_fields(record, point, pred.op_costs, settings)
        limit = memory_limit(settings)
        if pred is None and settings.get("mem_limit_bytes") is not None:  # nothing to hold to --mem-limit
            record.status = "skipped"
            _add_reason(record, "not run: --mem-limit needs a prediction")
            return record
        if limit and pred is not None and pred.peak_bytes > limit:
            record.status = "skipped"
            _add_reason(record, f"predicted peak {fmt_bytes(pred.peak_bytes)} exceeds the memory limit "
                                f"{fmt_bytes(limit)}")
            return record
        if settings.get("test_hook"):  # tests only: simulate a crash, hang or OOM inside a point
            _test_hook(settings["test_hook"], point)
        if device != "cpu":
            with phase(record, "cuda_context"):
                torch.cuda.synchronize(device)  # the context (allocates nothing through the allocator)
        # Both passes under light_dynamo's stand-in for torch._dynamo: every dispatch-mode handler (the
        # tracker, the SDPA spy) and torch.utils.checkpoint are wrapped by torch._disable_dynamo, whose
        # first call imports the compiler (0.8-1.5 s a process, measured: docs/gpu.md). Outside
        # compilation that wrapper costs one call (0.5 us measured; two per checkpointed block and
        # step), which these timings leave out.
        with light_dynamo():
            with phase(record, "memory_pass"):
                if device == "cpu":
                    _cpu_memory_pass(point, record)
                else:
                    record_cuda_memory(point, record, device, settings.get("timeline_dir") or "")
            with phase(record, "timing_pass"):
                _timing_pass(point, record, settings, record.point_phases_s["memory_pass"])
    except Exception as exc:  # noqa: BLE001 - any failure of one point is that point's result
        record.status = "oom" if is_oom(exc) else "error"
        at = record.reason.find(UNPREDICTED)  # a GPU point measured without a prediction keeps saying so
        record.reason = failure_reason(exc) + (f"; {record.reason[at:]}" if at >= 0 else "")  # issue 38
        keep_traceback(record, exc)  # the sweep writes it to RUN/logs (failures.py)
        if record.status == "error" and settings.get("debug"):
            traceback.print_exc()
    finally:
        record.point_wall_s = round(time.perf_counter() - started, 4)
        record.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return record


UNPREDICTED = "measured without a prediction"


def predict_for(point: Point, device: str, record: PointRecord):
    """The point's prediction as ``device`` runs it. On a GPU a prediction that fails costs the
    prediction, not the measurement (None, and the reason says why): the GPU's own allocator
    stops a point that does not fit, as an ``oom`` status. On the CPU it is the point's error:
    the prediction is what keeps a point that would not fit this machine's memory from running."""
    try:
        return predict(on_device(point, device))
    except Exception as exc:  # noqa: BLE001 - e.g. a plug-in that breaks under fake tensors
        if device == "cpu":
            raise
        _add_reason(record, f"{UNPREDICTED}: {failure_reason(exc)}")
        return None


@contextlib.contextmanager
def phase(record: PointRecord, name: str):
    """``with phase(record, "name"):`` puts that phase's seconds in the record's ``point_phases_s``."""
    began = time.perf_counter()
    try:
        yield
    finally:
        record.point_phases_s[name] = round(time.perf_counter() - began, 4)


def _cpu_memory_pass(point: Point, record: PointRecord) -> None:
    with RssSampler() as rss:
        measured = account(point, fake=False, device="cpu")
    record.measured_peak_bytes, record.measured_by = measured.peak_bytes, "tensor-tracker"
    record.rss_peak_bytes, record.rss_baseline_bytes = rss.peak_bytes, rss.baseline_bytes
    if measured.peak_bytes != record.predicted_peak_bytes:
        _add_reason(record, f"measured {measured.peak_bytes} B differs from predicted {record.predicted_peak_bytes} B: "
                    "the real run executed different ops than the fake one")


def record_cuda_memory(point: Point, record: PointRecord, device: str, timeline_dir: str = "") -> None:
    """The allocator's figures of one step; with ``timeline_dir`` (``sweep --timeline``) also
    its real memory snapshot, written there (an OOM's too: the exception still propagates)."""
    from attnprof.profiler.gpumeasure.allocator_pass import cuda_memory_pass
    from attnprof.profiler.gpumeasure.sdpa_spy import SdpaSpy

    torch.manual_seed(0)
    work = Workload(point, device)
    history = None
    if timeline_dir:
        from attnprof.profiler.gpumeasure.memory_history import MemoryHistory

        history = MemoryHistory(device=torch.device(device))
    try:
        with SdpaSpy() as spy:  # which SDPA kernel torch chose, read off the dispatcher (holds no tensor)
            pass_args = (work.step, torch.device(device))
            figures = cuda_memory_pass(*pass_args, history=history) if history else cuda_memory_pass(*pass_args)
    finally:
        if history is not None:
            _save_snapshot(point, record, timeline_dir, history)
    for key, value in figures.items():
        setattr(record, key, value)
    record.measured_by = "cuda-allocator"
    record.gpu_sdpa_backend_measured = spy.summary()
    record.cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    del work


def _save_snapshot(point: Point, record: PointRecord, timeline_dir: str, history) -> None:
    from attnprof.profiler.gpumeasure.memory_history import write_real_snapshot
    from attnprof.profiler.timeline.files import file_name

    _, problem = write_real_snapshot(Path(timeline_dir), file_name(point), history)
    history.snapshot = None  # the host memory it holds goes before the timing pass
    if problem:
        _add_reason(record, problem)


# A memory pass at least this long has already warmed this process up (thread pool, allocator,
# kernel selection) on the same ops; further warm-up steps would only cost time.
WARM_AFTER_S = 2.0


def _timing_pass(point: Point, record: PointRecord, settings: dict, memory_pass_s: float) -> None:
    from attnprof.profiler.measure.timing import cpu_time, cuda_time, summarize

    device = settings["device"]
    torch.manual_seed(0)
    work = Workload(point, device)
    warmup, repeats = settings.get("warmup", 1), settings.get("repeats", 3)
    if device == "cpu" and memory_pass_s >= WARM_AFTER_S and warmup:
        warmup = 0
        _add_reason(record, f"no extra warm-up: the {memory_pass_s:.1f} s memory pass ran the same ops first")
    backward = None if point.forward_only else (lambda loss: (work.backward(loss), work.update(), work.zero_grad()))
    if device == "cpu":
        fwd, bwd = cpu_time(work.forward, backward, warmup, repeats)
    else:
        fwd, bwd = cuda_time(work.forward, backward, warmup, repeats, torch.device(device))
    record.warmup, record.repeats = warmup, repeats
    record.time_fwd_samples_ms, record.time_bwd_samples_ms = [round(t, 4) for t in fwd], [round(t, 4) for t in bwd]
    record.time_fwd_ms, record.time_fwd_iqr_ms = summarize(fwd)[:2]
    if bwd:
        record.time_bwd_ms, record.time_bwd_iqr_ms = summarize(bwd)[:2]
    step_ms = record.time_fwd_ms + (record.time_bwd_ms or 0.0)
    if step_ms > 0:
        record.tokens_per_s = point.shape.tokens / (step_ms / 1e3)
        flops = (record.flops_fwd or 0) + (0 if point.forward_only else (record.flops_bwd or 0))
        record.achieved_flops_per_s = flops / (step_ms / 1e3)


def child_main(result_fd: int, point: Point, settings: dict) -> None:
    """Measure the point and send its record, length-prefixed, down the result pipe."""
    conn = Connection(result_fd, readable=False)
    try:
        conn.send(row_of(measure_point(point, settings)))  # the record, and a failure's traceback
    finally:
        conn.close()


def run_child(result_fd: int, point: Point, settings: dict, helper_pid: int) -> None:
    """Everything a worker does, right after the helper forked it; never returns.

    It dies with the helper (and so with the sweep), takes the default signal
    dispositions back (the helper ignores SIGINT), and leaves through ``os._exit``: the
    helper's atexit handlers and buffers are not the worker's to run or flush.
    """
    code = 0
    try:
        faulthandler.enable(all_threads=True)  # a crash: every thread's stack to stderr (worker_stderr.py)
        faulthandler.register(DUMP_SIGNAL, all_threads=True)  # a timeout: the same, then the helper's SIGKILL
        die_with_parent(helper_pid)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        child_main(result_fd, point, settings)
    except BaseException:  # noqa: BLE001 - report and leave; the sweep records "crashed"
        code = 1
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _test_hook(hook: str, point: Point) -> None:
    """``TARGET=ACTION`` (several: separated by ';'); TARGET a variant or VARIANT@LENGTH,
    ACTION sigkill | segfault | hang | oom | error."""
    for one in hook.split(";"):
        target, _, action = one.strip().partition("=")
        if target in (point.variant, f"{point.variant}@{point.shape.seq_len}"):
            _test_action(action)


def _test_action(action: str) -> None:
    if action in ("sigkill", "kill"):
        os.kill(os.getpid(), 9)
    elif action == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif action == "hang":
        time.sleep(3600)
    elif action == "oom":
        raise MemoryError("simulated out of memory")
    elif action == "error":  # shaped like CUDA's errors: a line of fact, then lines of generic advice
        raise RuntimeError("CUDA error: simulated initialization error\nCUDA kernel errors might be asynchronously "
                           "reported at some other API call.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1")
