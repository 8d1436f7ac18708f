"""The local executor (profiler.runner.executors.local) running several points at once
(``--parallel``, one per GPU on a GPU machine; tested here on the CPU, where it is allowed
with a warning). The executor flags' one-line refusals: test_executors.py."""

from __future__ import annotations

import pytest

from attnprof.profiler.records import key_of_record
from attnprof.profiler.runner.storage import read_records
from attnprof.profiler.runner.sweep import SweepError, SweepSettings, run_sweep
from attnprof.scenarios.scenario import Scenario

TINY = Scenario(name="tiny", variants=("sdpa", "full"), modes=("plain",), min_len=64, max_len=256,
                d_model=32, heads=2, layers=1, repeats=1, warmup=0)


def settings(**kw) -> SweepSettings:
    base = dict(device="cpu", warmup=0, repeats=1, point_timeout_s=120.0, test_hook="")
    return SweepSettings(**{**base, **kw})


def by_key(run_dir) -> dict:
    return {(r["variant"], r["seq_len"]): r for r in read_records(run_dir)}


@pytest.mark.slow
def test_parallel_points_keep_the_exact_memory_and_the_series_order(tmp_path, capsys):
    """Two series at once; an OOM still skips its series' longer lengths; each record once."""
    run_sweep(TINY, tmp_path / "one", settings(), show_progress=False)
    summary = run_sweep(TINY, tmp_path / "two", settings(parallel=2, test_hook="full@128=oom"), show_progress=False)
    assert "--parallel 2 on a CPU" in capsys.readouterr().err
    one, two = by_key(tmp_path / "one"), by_key(tmp_path / "two")
    assert len(read_records(tmp_path / "two")) == len(two) == len(summary.records) == 6
    for n in (64, 128, 256):
        assert two[("sdpa", n)]["status"] == "ok"
        assert two[("sdpa", n)]["measured_peak_bytes"] == one[("sdpa", n)]["measured_peak_bytes"] > 0
        assert two[("sdpa", n)]["host"]
    assert two[("full", 64)]["measured_peak_bytes"] == one[("full", 64)]["measured_peak_bytes"]
    assert two[("full", 128)]["status"] == "oom"
    skipped = two[("full", 256)]
    assert skipped["status"] == "skipped" and "out of memory at n=128" in skipped["reason"]
    pids = {r["worker_pid"] for r in read_records(tmp_path / "two") if r["worker_pid"]}
    assert len(pids) == 5  # a fresh worker per point run
    manifest = (tmp_path / "two" / "manifest.json").read_text()
    assert '"executor": "local"' in manifest and '"slots": 2' in manifest


def test_a_crashed_point_records_its_host_and_worker_pid(tmp_path):
    run_sweep(TINY.override(variants=("sdpa",), max_len=64), tmp_path, settings(test_hook="sdpa@64=kill"),
              show_progress=False)
    [record] = read_records(tmp_path)
    assert record["status"] == "crashed" and "SIGKILL" in record["reason"]
    assert record["host"] and record["worker_pid"] and record["predicted_peak_bytes"] > 0


def test_parallel_with_one_named_gpu_is_refused(tmp_path):
    with pytest.raises(SweepError, match="needs --device cuda"):
        run_sweep(TINY, tmp_path, settings(device="cuda:0", parallel=2), show_progress=False)


def test_helpers_notes_are_said_once_per_topic_however_many_helpers_send_them():
    """One helper per GPU: each that cannot fork says so with its own thread count; the run says it once."""
    from attnprof.profiler.runner.executors.local import LocalExecutor
    from attnprof.profiler.runner.interrupts import Interrupts

    said = []
    executor = LocalExecutor(settings(), Interrupts(), warn=said.append)
    for threads in (3, 5, 3):
        executor.note_once(f"the measuring helper did not fork: this process runs {threads} threads; ...")
    executor.note_once("another topic: a figure")
    assert said == ["warning: the measuring helper did not fork: this process runs 3 threads; ...",
                    "warning: another topic: a figure"]
