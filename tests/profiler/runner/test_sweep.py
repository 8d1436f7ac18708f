"""The sweep: real measurements in isolated processes; crashes, hangs and OOMs are
statuses; Ctrl-C and --resume lose nothing."""

import os
import signal
import subprocess
import sys
import time

import pytest

from attnprof.profiler.runner.storage import load_run, read_records
from attnprof.profiler.runner.sweep import SweepSettings, extrapolate_s, run_sweep
from attnprof.scenarios.scenario import Scenario

TINY = Scenario(name="tiny", variants=("sdpa", "full"), modes=("plain",), min_len=64, max_len=256,
                d_model=32, heads=2, layers=1, repeats=2, warmup=0)


def settings(**kw):
    base = dict(device="cpu", warmup=0, repeats=2, point_timeout_s=60.0, test_hook="")
    return SweepSettings(**{**base, **kw})


def by_key(run_dir):
    return {(r["variant"], r["mode"], r["seq_len"]): r for r in read_records(run_dir)}


@pytest.mark.slow
def test_every_point_gets_a_real_measured_record(tmp_path):
    summary = run_sweep(TINY, tmp_path, settings(), show_progress=False)
    records = by_key(tmp_path)
    assert len(records) == 6 and len(summary.records) == 6
    for rec in records.values():
        assert rec["status"] == "ok", rec["reason"]
        assert rec["measured_by"] == "tensor-tracker"
        assert rec["measured_peak_bytes"] == rec["predicted_peak_bytes"] > 0
        assert len(rec["time_fwd_samples_ms"]) == 2 and rec["time_fwd_ms"] > 0 and rec["time_bwd_ms"] > 0
        assert rec["rss_peak_bytes"] >= rec["rss_baseline_bytes"] > 0
        assert rec["flops_fwd"] > 0 and rec["tokens_per_s"] > 0
    # quadratic scores: full's peak grows faster than sdpa's
    grow = {v: records[(v, "plain", 256)]["measured_peak_bytes"] / records[(v, "plain", 64)]["measured_peak_bytes"]
            for v in ("full", "sdpa")}
    assert grow["full"] > grow["sdpa"]
    frame = load_run(tmp_path)
    assert len(frame) == 6 and {"variant", "seq_len", "measured_peak_bytes", "time_fwd_ms"} <= set(frame.columns)
    manifest = (tmp_path / "manifest.json").read_text()
    assert "torch_version" in manifest and '"name": "tiny"' in manifest


@pytest.mark.slow
@pytest.mark.parametrize("action, status, why", [("sigkill", "crashed", "SIGKILL"), ("segfault", "crashed", "SIGSEGV"),
                                                   ("oom", "oom", "MemoryError")])
def test_a_dying_point_becomes_a_status_and_the_sweep_goes_on(tmp_path, action, status, why):
    run_sweep(TINY, tmp_path, settings(test_hook=f"full@128={action}"), show_progress=False)
    records = by_key(tmp_path)
    assert len(records) == 6
    hit = records[("full", "plain", 128)]
    assert hit["status"] == status and why in hit["reason"]
    assert hit["predicted_peak_bytes"] > 0  # the record still carries the prediction
    assert records[("sdpa", "plain", 256)]["status"] == "ok"
    after = records[("full", "plain", 256)]
    if action == "segfault":  # issue 38: what the dead worker wrote (faulthandler's stack) is kept, and says where
        log = (tmp_path / hit["error_log"]).read_text()
        assert "the worker's standard error" in log and "Segmentation fault" in log
        assert "(at profiler/runner/worker.py:" in hit["reason"]
    elif action == "sigkill":  # a SIGKILL leaves no word: no log, as before
        assert not hit["error_log"]
    if status == "oom":  # longer lengths of that series are not run after an OOM
        assert after["status"] == "skipped" and "out of memory at n=128" in after["reason"]
        assert after["predicted_peak_bytes"] > 0
    else:
        assert after["status"] == "ok"


@pytest.mark.slow
def test_a_hang_times_out_and_longer_lengths_are_skipped(tmp_path):
    run_sweep(TINY, tmp_path, settings(test_hook="full@64=hang", point_timeout_s=3.0), show_progress=False)
    records = by_key(tmp_path)
    assert records[("full", "plain", 64)]["status"] == "timeout"
    # issue 38: its stacks asked for before SIGKILL, so faulthandler says where it hung: in the reason and the log
    hung = records[("full", "plain", 64)]
    assert "(at profiler/runner/worker.py:" in hung["reason"], hung["reason"]
    assert "in _test_action" in (tmp_path / hung["error_log"]).read_text()
    assert records[("full", "plain", 128)]["status"] == "skipped"
    assert "timed out at n=64" in records[("full", "plain", 128)]["reason"]
    assert records[("sdpa", "plain", 64)]["status"] == "ok"


@pytest.mark.slow
def test_points_predicted_over_the_memory_limit_are_skipped_with_their_figure(tmp_path):
    run_sweep(TINY, tmp_path, settings(mem_limit_bytes=2_000_000), show_progress=False)
    records = by_key(tmp_path)
    big = records[("full", "plain", 256)]
    assert big["status"] == "skipped" and "exceeds the memory limit" in big["reason"]
    assert big["predicted_peak_bytes"] > 2_000_000 and big["measured_peak_bytes"] is None
    assert records[("sdpa", "plain", 64)]["status"] == "ok"


def test_time_extrapolation():
    assert extrapolate_s([], 128) is None
    assert extrapolate_s([(64, 1.0)], 128) == pytest.approx(4.0)  # assumes quadratic with one point
    assert extrapolate_s([(64, 1.0), (128, 2.0)], 256) == pytest.approx(4.0)  # measured slope 1
    assert extrapolate_s([(64, 1.0), (128, 1.0)], 256) == pytest.approx(2.0)  # slope clamped to >= 1


@pytest.mark.slow
def test_interrupt_then_resume_loses_nothing_and_duplicates_nothing(tmp_path):
    seen = []

    def stop_after_three(record):
        seen.append(record)
        if len(seen) == 3:
            raise KeyboardInterrupt

    summary = run_sweep(TINY, tmp_path, settings(), show_progress=False, on_record=stop_after_three)
    assert summary.interrupted and len(read_records(tmp_path)) == 3
    first = {(r["variant"], r["seq_len"]): r["finished_at"] for r in read_records(tmp_path)}
    resumed = run_sweep(TINY, tmp_path, settings(), resume=True, show_progress=False)
    assert resumed.kept == 3 and len(resumed.records) == 3
    records = read_records(tmp_path)
    keys = [(r["variant"], r["seq_len"]) for r in records]
    assert len(keys) == len(set(keys)) == 6
    assert all(r["finished_at"] == first[(r["variant"], r["seq_len"])] for r in records[:3])


def test_sigterm_mid_point_returns_interrupted_by_it_within_seconds(tmp_path):
    """The library's side of SIGTERM: the hanging point is killed, run_sweep returns
    interrupted_by=SIGTERM (the CLI exits 143), the earlier point is kept."""
    import threading

    small = TINY.override(variants=("sdpa",), max_len=128)
    timer = threading.Timer(0.1, lambda: None)

    def on_record(record):  # the first point is done: signal once the second one hangs
        nonlocal timer
        timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()

    summary = run_sweep(small, tmp_path, settings(test_hook="sdpa@128=hang", point_timeout_s=600.0),
                        show_progress=False, on_record=on_record)
    timer.join()
    assert summary.interrupted and summary.interrupted_by == signal.SIGTERM
    # the hanging point ended by the signal, not by the 600 s point timeout: it left no record
    assert [r["seq_len"] for r in read_records(tmp_path)] == [64]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored


def test_a_finished_folder_needs_resume_and_a_changed_scenario_cannot_resume(tmp_path):
    from attnprof.profiler.runner.sweep import SweepError

    small = TINY.override(variants=("sdpa",), max_len=64)
    run_sweep(small, tmp_path, settings(), show_progress=False)
    with pytest.raises(SweepError, match="--resume"):
        run_sweep(small, tmp_path, settings(), show_progress=False)
    with pytest.raises(SweepError, match="d_model"):
        run_sweep(small.override(d_model=64), tmp_path, settings(), resume=True, show_progress=False)


@pytest.mark.slow
def test_ctrl_c_on_the_cli_keeps_points_and_resume_completes(tmp_path):
    """A real SIGINT to the whole process group (what a terminal's Ctrl-C sends)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnprof", "sweep", "--variant", "sdpa,full", "--mode", "plain", "--min-len", "64",
           "--max-len", "1024", "--d-model", "32", "--heads", "2", "--layers", "1", "--repeats", "2", "--warmup", "0",
           "--device", "cpu", "--out", str(out), "--no-report", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(read_records(out)) < 3:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "--resume" in err
    kept = read_records(out)
    assert 3 <= len(kept) < 10
    done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    keys = [(r["variant"], r["seq_len"]) for r in read_records(out)]
    assert len(keys) == len(set(keys)) == 10



def test_a_sweep_note_is_one_line_whatever_the_folder_is_called(capsys):
    """The quarantine note and the invalid-line warnings name the run folder: a newline in its name is spelled out."""
    from attnprof.profiler.runner.sweep import print_stderr

    print_stderr("warning: moved 1 invalid line(s) of /tmp/run\nPASS fake/results.jsonl")
    assert capsys.readouterr().err == "warning: moved 1 invalid line(s) of /tmp/run\\nPASS fake/results.jsonl\n"
