"""`predict --timeline DIR` and `compare-timelines`, through the api and the CLI."""

import os
import pickle

import pytest
from typer.testing import CliRunner

from attnprof import api
from attnprof.api.timelines import compare_timelines
from attnprof.cli import app

runner = CliRunner()
SMALL = ["--variant", "full", "--mode", "plain", "--seq-len", "128", "--d-model", "32", "--heads", "2",
         "--layers", "1"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timelines") / "out"
    result = api.predict(variants=["full"], modes=["plain"], seq_lens=[128], d_model=32, heads=2, layers=1,
                         gpus="h100-sxm", timeline=folder)
    return folder, result


def test_predict_writes_a_snapshot_and_a_trace_per_point_and_gpu(written):
    folder, result = written
    names = sorted(p.name for p in folder.iterdir())
    assert [str(p) for p in result.timeline_files] == [str(folder / n) for n in
                                                      sorted(names, key=lambda n: not n.endswith(".pickle"))]
    assert len(names) == 2 and names[0].endswith(".memory.pickle") and names[1].endswith(".trace.json")
    assert "h100-sxm" in names[0]


def test_compare_timelines_of_a_snapshot_with_itself(written):
    folder, result = written
    snap = result.timeline_files[0]
    out = compare_timelines(snap, snap)
    assert out.first_difference is None and out.predicted.allocs > 0
    cli = runner.invoke(app, ["compare-timelines", str(snap), str(snap)])
    assert cli.exit_code == 0 and "allocated peak" in cli.output


def test_a_planted_pickle_is_refused_in_one_line_and_never_run(written, tmp_path):
    folder, result = written
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    evil = tmp_path / "real.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Planted()]]}, protocol=4))
    cli = runner.invoke(app, ["compare-timelines", str(result.timeline_files[0]), str(evil)])
    assert cli.exit_code == 2 and len(cli.output.strip().splitlines()) == 1 and "Traceback" not in cli.output
    assert not marker.exists()


def test_an_unwritable_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    calls = []
    monkeypatch.setattr("attnprof.scenarios.plan.series", lambda *a, **k: calls.append(1))
    cli = runner.invoke(app, ["predict", *SMALL, "--timeline", str(tmp_path / "file" / "out")])
    assert cli.exit_code == 2 and len(cli.output.strip().splitlines()) == 1 and calls == []
    cli = runner.invoke(app, ["predict", *SMALL, "--budget", "1GiB", "--timeline", str(tmp_path / "out")])
    assert cli.exit_code == 2 and "--budget" in cli.output


@pytest.mark.slow
def test_the_cli_writes_the_files_without_a_gpu_timed_on_this_cpu(tmp_path):
    cli = runner.invoke(app, ["predict", *SMALL, "--timeline", str(tmp_path / "t")])
    assert cli.exit_code == 0, cli.output
    assert sorted(p.suffix for p in (tmp_path / "t").iterdir()) == [".json", ".pickle"]
    assert "wrote" in cli.output


def test_at_scope_attention_the_gpu_snapshot_has_predicts_gpu_peaks(tmp_path):
    """Issue 39's projections, held on the GPU at scope attention: ``predict --gpu --timeline``
    writes the allocated and reserved peaks ``predict --gpu`` reports (they differed by
    4·d_model² elements before the timeline's GPU trace held them too)."""
    from attnprof.profiler.timeline.plain_pickle import load_plain
    from attnprof.profiler.timeline.snapshot_diff import summarise

    result = api.predict(variants=["sdpa"], scope="attention", seq_lens=[128], d_model=64, heads=2, dtype="bfloat16",
                         gpus="h200", timeline=tmp_path / "t")
    record = next(r for r in result.records if r.get("status") == "ok")
    snap = summarise(load_plain(result.timeline_files[0]))
    assert record["gpu_sdpa_backend"] == "cudnn"
    assert snap.allocated_peak_bytes == record["gpu_allocated_peak_bytes"]
    assert snap.reserved_peak_bytes == record["gpu_reserved_peak_bytes"]


@pytest.mark.parametrize("device, device_name, kernels", [("cuda", "a GPU of no table entry", "cuda"),
                                                          ("cpu", "", "")])
def test_a_cuda_runs_predicted_timelines_trace_the_step_cuda_ran(tmp_path, monkeypatch, device, device_name, kernels):
    """sweep --timeline: beside a CUDA run's real snapshots, the predicted timeline traces CUDA's
    kernels (RMSNorm's fused one) even where the GPU has no table entry; a CPU run's, the CPU's."""
    from attnprof.api import timelines
    from attnprof.profiler.records import PointRecord
    from attnprof.profiler.runner.storage import append_record
    from attnprof.profiler.timeline import files
    from attnprof.scenarios.plan import series
    from attnprof.scenarios.scenario import Scenario

    sc = Scenario(variants=("sdpa",), modes=("plain",), seq_lens=(64,), d_model=32, heads=2, layers=1, norm="rmsnorm")
    point = series(sc)[0][0]
    ident = point.identity()
    append_record(tmp_path, PointRecord(**ident, status="ok", device=device, device_name=device_name))
    seen = []
    monkeypatch.setattr(files, "write_point", lambda folder, p, gpu=None, rates=None: seen.append((p, gpu)) or [])
    timelines.write_run_timelines(sc, tmp_path)
    assert [(p.key(), p.kernels, gpu) for p, gpu in seen] == [(point.key(), kernels, None)]
