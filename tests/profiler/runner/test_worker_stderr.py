"""runner/worker_stderr.py: a dead or hung worker's standard error, its tail and where it died."""

from attnprof.profiler.runner import worker_stderr
from attnprof.profiler.runner.failures import STDERR_KEY, write_log
from attnprof.profiler.runner.worker_stderr import capture_file, read_tail, where, with_where
from attnprof.profiler.records import Point, Shape

ROOT = worker_stderr.__file__.rsplit("/profiler/", 1)[0]
DUMP = f'''Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "{ROOT}/profiler/runner/progress.py", line 7 in other_thread

Current thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/site-packages/torch/nn/functional.py", line 99 in softmax
  File "{ROOT}/scenarios/variants/full.py", line 61 in core
  File "{ROOT}/profiler/runner/worker.py", line 132 in measure_point

Extension modules: torch._C (total: 1)
'''


def test_the_innermost_attnprof_frame_of_the_current_thread_is_where_it_died():
    assert where(DUMP) == "scenarios/variants/full.py:61"
    assert with_where("worker killed by SIGSEGV", DUMP) == "worker killed by SIGSEGV (at scenarios/variants/full.py:61)"


def test_without_a_current_thread_the_first_stack_counts_and_no_frame_of_ours_names_nothing():
    only = DUMP.replace("Current thread 0x00007f0000000002", "Thread 0x00007f0000000002")
    assert where(only) == "profiler/runner/progress.py:7"
    theirs = 'Current thread 0x01 (most recent call first):\n  File "/usr/lib/x.py", line 3 in f\n'
    assert where(theirs) is None and with_where("r", theirs) == "r"
    assert where("") is None and with_where("r", "") == "r"


def test_the_tail_keeps_the_end_and_says_how_much_was_cut(monkeypatch):
    monkeypatch.setattr(worker_stderr, "TAIL_BYTES", 10)
    f = capture_file()
    f.write(b"0123456789abcdef\xff")
    text = read_tail(f)
    assert text.endswith("89abcdef\\xff") and text.startswith("[... the first 7 bytes cut ...]\n")
    assert read_tail(capture_file()) == "" and read_tail(None) == ""
    f.close()
    assert read_tail(f) == ""  # closed: nothing, no exception


def test_a_crashed_points_stderr_goes_to_its_log_and_an_ok_points_is_dropped(tmp_path):
    point = Point("full", "plain", "model", Shape(seq_len=64, d_model=32, heads=2, layers=1))
    row = write_log(tmp_path, point, {"status": "crashed", "reason": "worker killed by SIGSEGV", STDERR_KEY: DUMP})
    assert STDERR_KEY not in row
    log = (tmp_path / row["error_log"]).read_text()
    assert "the worker's standard error:\nFatal Python error: Segmentation fault" in log
    ok = write_log(tmp_path / "ok", point, {"status": "ok", "reason": "", STDERR_KEY: DUMP})
    assert STDERR_KEY not in ok and "error_log" not in ok and not (tmp_path / "ok").exists()


def test_the_capture_file_is_unlinked():
    f = capture_file()
    try:
        assert isinstance(f.name, int)  # opened by its descriptor: no name left on disk to follow or replace
    finally:
        f.close()
