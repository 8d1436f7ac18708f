"""The command line: listings, predict output, exit codes 0/1/2/130, one-line errors,
shared flags defined once, and a start-up that imports no torch, pandas or matplotlib."""

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from attnprof import api
from attnprof.cli import app
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import append_record

runner = CliRunner()


def attnprof(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=timeout)


def make_run(path, peak_bytes=40 << 20):
    """A run folder of two synthetic CPU points (no torch work), enough for the gate."""
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"scenario": api.Scenario(name="ci").to_dict(),
                                                    "environment": {"device": "cpu", "device_name": "Test CPU"}}))
    for n in (256, 512):
        append_record(path, PointRecord(variant="full", mode="plain", scope="model", seq_len=n, batch=1, d_model=256,
                                        heads=4, head_dim=64, layers=2, dtype="float32", device="cpu",
                                        device_name="Test CPU", predicted_peak_bytes=peak_bytes * n // 256,
                                        measured_peak_bytes=peak_bytes * n // 256, measured_by="tensor-tracker",
                                        time_fwd_ms=2.0, time_bwd_ms=3.0))
    return path


# --- listings --------------------------------------------------------------------------------------
def test_help_and_variants_list_the_six_variants_with_papers():
    assert runner.invoke(app, ["--help"]).exit_code == 0
    result = runner.invoke(app, ["variants"])
    assert result.exit_code == 0
    out = result.output
    for name in ["full", "sdpa", "talking_heads", "lsh", "sparse_strided", "sparse_fixed", "sliding_window"]:
        assert f"\n{name} " in "\n" + out
    assert out.count("paper:") >= 6 and "arXiv 2001.04451" in out
    assert "option n_hashes (int, default 2): hash rounds" in out


def test_variants_json_has_options_with_type_default_and_help():
    result = runner.invoke(app, ["variants", "--json"])
    assert result.exit_code == 0, result.output
    lsh = {v["name"]: v for v in json.loads(result.output)}["lsh"]
    assert {o["name"]: (o["type"], o["default"]) for o in lsh["options"]}["bucket_size"] == ("int", 64)


def test_scenarios_lists_the_presets():
    out = runner.invoke(app, ["scenarios"]).output
    assert "default" in out and "ci" in out


def test_help_groups_flags_in_panels_and_shows_examples():
    out = runner.invoke(app, ["sweep", "--help"], env={"COLUMNS": "160"}).output
    for panel in ("What to profile", "Model shape", "Sequence lengths", "Measurement", "Output", "Examples"):
        assert panel in out
    assert "attnprof sweep --max-len 65536" in out
    assert "lsh[n_hashes=8]" in out  # brackets are shown, not eaten as markup
    assert "Examples" in runner.invoke(app, ["--help"]).output


def test_the_flags_predict_and_sweep_share_are_defined_once():
    group = typer.main.get_command(app)
    predict, sweep = (group.commands[name] for name in ("predict", "sweep"))
    sweep_params = {p.name: p for p in sweep.params}
    # --timeline means the same in both (write the predicted timelines); predict names the folder,
    # a sweep writes them into its run folder (RUN/timelines, beside the real snapshots)
    shared = [p for p in predict.params if p.name in sweep_params and p.name not in ("help", "timeline")]
    assert len(shared) >= 15
    for p in shared:
        q = sweep_params[p.name]
        assert (p.opts, p.help, p.metavar, p.rich_help_panel) == (q.opts, q.help, q.metavar, q.rich_help_panel), p.name


def test_one_meaning_per_flag_json_prints_and_json_out_writes(tmp_path):
    run = make_run(tmp_path / "run")
    baseline = tmp_path / "baseline.json"
    assert runner.invoke(app, ["gate", "--baseline", str(baseline), "--update", str(run)]).exit_code == 0
    report = tmp_path / "gate.json"
    result = runner.invoke(app, ["gate", "--baseline", str(baseline), str(run), "--json-out", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())
    assert runner.invoke(app, ["gate", "--baseline", str(baseline), str(run), "--json", str(report)]).exit_code == 2


# --- predict -----------------------------------------------------------------------------------------
def test_predict_json_has_the_documented_fields():
    result = runner.invoke(app, ["predict", "--variant", "sdpa,lsh[n_hashes=4]", "--mode", "plain", "--seq-len", "1024",
                                 "--seq-len", "2048", "--d-model", "64", "--heads", "4", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 4
    for row in rows:
        for field in ["variant", "mode", "scope", "seq_len", "batch", "heads", "d_model", "layers", "dtype",
                      "predicted_peak_bytes", "flops"]:
            assert field in row
    assert {r["variant"] for r in rows} == {"sdpa", "lsh[n_hashes=4]"}


@pytest.mark.slow
def test_predict_with_a_plugin_that_names_cuda_ends_in_one_line_not_an_abort(tmp_path):
    """A plug-in that makes a tensor on "cuda" used to abort the process (std::terminate in autograd,
    no Python error); now its point says why, the other point is predicted, and the exit is 1."""
    (tmp_path / "cuda_attn.py").write_text(
        "import torch\nfrom attnprof.scenarios.variants.full import FullAttention\n"
        "class OnCuda(FullAttention):\n    description = 'names cuda'\n    paper = 'me, arXiv 0000.00000'\n"
        "    def core(self, q, k, v):\n        bias = torch.zeros(1, device='cuda', requires_grad=True)\n"
        "        return super().core(q, k, v) + bias.to(q.device)\n")
    done = subprocess.run([sys.executable, "-m", "attnprof", "predict", "--variant", "cuda_attn:OnCuda,full",
                           "--mode", "plain", "--seq-len", "256", "--d-model", "32", "--heads", "2", "--layers", "1",
                           "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                              str(tmp_path), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "terminate" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: 1 of 2 predictions failed; the first: RuntimeError: attnprof traces on the CPU, but aten.zeros")
    rows = json.loads(done.stdout)
    assert [r["status"] for r in rows] == ["error", "ok"] and rows[1]["predicted_peak_bytes"] > 0


def test_predict_full_attention_at_64k_reports_the_16_gib_scores():
    result = runner.invoke(app, ["predict", "--variant", "full", "--scope", "attention", "--batch", "1", "--heads", "1",
                                 "--head-dim", "64", "--dtype", "float32", "--seq-len", "65536", "--forward-only"])
    assert result.exit_code == 0, result.output
    # the textbook causal einsum's forward: 16 GiB scores, their 16 GiB masked copy, the 4 GiB bool mask
    assert "36.05 GiB" in result.output and "16.00 GiB" in result.output and "[1, 1, 65536, 65536]" in result.output
    assert "4.00 GiB" in result.output and "bool [65536, 65536]" in result.output


def test_budget_reports_the_longest_fitting_power_of_two():
    result = runner.invoke(app, ["predict", "--variant", "full,sdpa", "--mode", "plain", "--d-model", "64", "--heads", "4",
                                 "--layers", "1", "--budget", "64MiB", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(result.output)}
    assert rows["full"]["longest_fitting_seq_len"] < rows["sdpa"]["longest_fitting_seq_len"]
    assert rows["full"]["predicted_peak_bytes"] <= 64 << 20


def test_readme_predict_with_bf16_and_a_budget_runs():
    result = runner.invoke(app, ["predict", "--variant", "sdpa", "--mode", "plain", "--d-model", "1024", "--heads", "16",
                                 "--layers", "12", "--dtype", "bf16", "--budget", "80GiB", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["dtype"] == "bfloat16"


def test_tokens_per_batch_sets_batch_from_the_length():
    result = runner.invoke(app, ["predict", "--variant", "sdpa", "--mode", "plain", "--min-len", "1024",
                                 "--max-len", "4096", "--d-model", "64", "--heads", "4", "--tokens-per-batch", "8192",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert {r["seq_len"]: r["batch"] for r in json.loads(result.output)} == {1024: 8, 2048: 4, 4096: 2}


# --- exit codes inside typer (CliRunner) ------------------------------------------------------------
def test_a_user_error_inside_a_command_is_one_line_and_exit_2():
    result = runner.invoke(app, ["predict", "--d-model", "100", "--heads", "3"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: ") and "not divisible" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_memory_regression_exits_1(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert runner.invoke(app, ["gate", "--baseline", str(baseline), "--update", str(make_run(tmp_path / "a"))]).exit_code == 0
    result = runner.invoke(app, ["gate", "--baseline", str(baseline), str(make_run(tmp_path / "b", 60 << 20))])
    assert result.exit_code == 1, result.output
    assert "full" in result.stdout


def test_ctrl_c_in_a_command_exits_130(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "predict", interrupted)
    result = runner.invoke(app, ["predict", "--variant", "sdpa"])
    assert result.exit_code == 130 and "interrupted" in result.stderr


@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143), (None, 130)])
def test_an_interrupted_sweep_exits_128_plus_its_signal(monkeypatch, tmp_path, signum, code):
    summary = SimpleNamespace(interrupted=True, records=[], kept=0, wall_s=1.0, compute_s=1.0, timed_s=0.5,
                              ahead_s=0.0)
    if signum is not None:
        summary.interrupted_by = signum

    def fake_sweep(*args, on_start=None, **kwargs):
        run = api.SweepRun(tmp_path / "run", api.Scenario(), "cpu", 1 << 30, summary)
        on_start(run)
        return run

    monkeypatch.setattr(api, "sweep", fake_sweep)
    result = runner.invoke(app, ["sweep", "--out", str(tmp_path / "run")])
    assert result.exit_code == code
    assert "--resume" in result.stderr and "attnprof sweep: scenario" in result.stderr


def test_the_sweeps_banner_and_paths_are_spelled_out(monkeypatch, tmp_path):
    """A scenario file's name and an --out path reach the terminal escaped: ESC cleared the screen."""
    summary = SimpleNamespace(interrupted=True, records=[], kept=0, wall_s=1.0, compute_s=1.0, timed_s=0.5,
                              ahead_s=0.0)
    out = tmp_path / "run\r\x07\nPASS"

    def fake_sweep(*args, on_start=None, **kwargs):
        run = api.SweepRun(out, api.Scenario(name="evil\x1b[2J\x07\u202e"), "cpu", 1 << 30, summary)
        on_start(run)
        return run

    monkeypatch.setattr(api, "sweep", fake_sweep)
    result = runner.invoke(app, ["sweep", "--out", str(out)])
    assert result.exit_code == 130
    assert not any(ch in result.stderr for ch in "\x1b\x07\r\u202e"), repr(result.stderr)
    assert "scenario evil\\x1b[2J\\x07\\u202e" in result.stderr and "run\\r\\x07\\nPASS" in result.stderr
    assert not any(line.startswith("PASS") for line in result.stderr.splitlines())  # a newline in a name: no line of its own


def test_a_sweep_that_measured_nothing_names_its_reason_spelled_out(monkeypatch, tmp_path):
    """Issue 38's failure line quotes a reason read back from the run folder (a --resume keeps
    earlier records): its escape sequences reach the terminal spelled out (issue 40 item 2)."""
    summary = SimpleNamespace(interrupted=False, records=[], kept=1, wall_s=1.0, compute_s=1.0, timed_s=0.5,
                              ahead_s=0.0)
    out = tmp_path / "run"
    out.mkdir()
    append_record(out, PointRecord(variant="full", mode="plain", scope="model", seq_len=256, batch=1, d_model=256,
                                   heads=4, head_dim=64, layers=2, dtype="float32", device="cpu", status="error",
                                   reason="RuntimeError: planted \x1b[2J\x1b]0;title\x07 text"))

    def fake_sweep(*args, on_start=None, **kwargs):
        run = api.SweepRun(out, api.Scenario(), "cpu", 1 << 30, summary)
        on_start(run)
        return run

    monkeypatch.setattr(api, "sweep", fake_sweep)
    result = runner.invoke(app, ["sweep", "--out", str(out)])
    assert result.exit_code == 1
    assert "error: no point ended ok" in result.stderr and "planted \\x1b[2J" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


# --- exit codes and one-line errors of the real entry point (subprocess) ----------------------------
@pytest.mark.parametrize("args, message", [
    (["predict", "--seq-len", "0"], "positive"),
    (["predict", "--seq-len", "-5"], "positive"),
    (["predict", "--d-model", "100", "--heads", "3"], "not divisible"),
    (["predict", "--variant", "nope"], "unknown variant"),
    (["predict", "--mode", "sideways"], "unknown mode"),
    (["predict", "--dtype", "int7"], "int7"),
    (["predict", "--budget", "lots"], "cannot parse size"),
    (["predict", "--seq-len", "abc"], "seq-len"),
    (["predict", "--variant", "lsh[n_hashes=x]"], "not an integer; valid options"),
    (["predict", "--variant", "lsh[colour=red]"], "valid options"),
    (["predict", "--variant", "lsh[bucket_size=48]", "--seq-len", "1024"], "bucket_size"),
    (["predict", "--no-such-flag"], "no-such-flag"),
    (["sweep", "--scenario", "no-such-scenario"], "unknown scenario"),
    (["sweep", "--device", "tpu"], "unknown device"),
    (["report", "/nonexistent/run"], "run"),
    (["gate", "--baseline", "/nonexistent.json", "/nonexistent/run"], "error"),
    (["gate", "/nonexistent/run"], "--baseline"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = attnprof(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_a_refused_sweep_prints_only_the_error(tmp_path):
    run = make_run(tmp_path / "run")
    result = attnprof("sweep", "--out", str(run), "--device", "cpu")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "--resume" in result.stderr
    assert result.stdout == ""


def test_bare_attnprof_prints_the_help():
    result = attnprof()
    assert result.returncode == 0 and "Usage" in result.stdout and "sweep" in result.stdout


def test_start_up_imports_no_torch_pandas_or_matplotlib():
    """--help, variants and scenarios, in one fresh interpreter: the heavy libraries stay out."""
    code = textwrap.dedent("""
        import contextlib, io, sys
        import attnprof.cli
        for args in (["--help"], ["variants"], ["scenarios"], ["predict", "--help"], ["sweep", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    attnprof.cli.main(args)
                except SystemExit as exc:
                    assert exc.code == 0, (args, exc.code)
        print(sorted(m for m in ("torch", "pandas", "matplotlib", "numpy") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_variants_falls_back_to_the_registry_when_the_source_cannot_be_read(monkeypatch):
    from attnprof.scenarios.variants import catalog

    def unreadable():
        raise catalog.StaticReadError("a construct the reader does not know")

    monkeypatch.setattr(catalog, "variants", unreadable)
    result = runner.invoke(app, ["variants"])
    assert result.exit_code == 0 and "arXiv 2001.04451" in result.output and "option n_hashes" in result.output


# --- quick exit --------------------------------------------------------------------------------
def test_predict_as_a_process_ends_without_teardown_and_loses_no_output(tmp_path):
    """``python -m attnprof predict`` ends with os._exit (QUICK_EXIT): everything it printed
    arrives, to the last byte of a long JSON document, its exit code is kept (0, and 2 for a
    mistake), and the cache entries it wrote are complete (read back by a second run)."""
    import os

    env = {**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "attnprof", "predict", "--seq-len", "128", "--d-model", "32", "--heads", "2",
           "--layers", "1", "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    records = json.loads(first.stdout)  # the whole document: it parses
    from attnprof.scenarios.variants.catalog import builtin_names

    assert len(records) == 3 * len(builtin_names())  # every built-in x the three modes
    assert not any(r["prediction_cached"] for r in records)
    again = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=True).stdout)
    assert all(r["prediction_cached"] for r in again) and again == [{**r, "prediction_cached": True,
                                                                     "predict_ms": a["predict_ms"]}
                                                                    for r, a in zip(records, again)]
    wrong = subprocess.run(cmd + ["--budget", "lots"], capture_output=True, text=True, env=env, timeout=120)
    assert wrong.returncode == 2 and wrong.stdout == "" and wrong.stderr.startswith("error:")


def test_quick_exit_only_from_the_console_and_only_for_quick_commands(monkeypatch):
    """In-process callers (tests, notebooks) get SystemExit as before; the console entry
    point flushes and ends at once for predict and calibrate only."""
    import attnprof.cli as cli
    import attnprof.cli_exits as exits

    ended = []

    def fake_exit(code):
        ended.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(exits.os, "_exit", fake_exit)
    with pytest.raises(SystemExit) as leave:
        cli.main(["predict", "--budget", "lots"])
    assert leave.value.code == 2 and ended == []
    for args, quick in [(["predict"], True), (["calibrate", "--json"], True), (["variants"], False), ([], False)]:
        ended.clear()
        with pytest.raises(SystemExit) as leave:
            cli.leave(3, args, console=True)
        assert leave.value.code == 3 and ended == ([3] if quick else [])
