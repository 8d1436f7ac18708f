"""Reports and capacity with named GPUs (--gpu on sweep and report): the "what fits where"
table and the capacity chart are per GPU, by the GPU memory model's total against the
GPU's own memory, labelled "predicted (GPU model)"; the longest fitting length per GPU
equals a direct search with the model. Tiny GPUs from a test GPU file keep it cheap."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.predict.gpu_points import gpu_capacity_predictions, predict_gpu
from attnprof.profiler.memmodel.gpu_peak import TraceCache
from attnprof.profiler.hardware.gpus import ENV_VAR, resolve_gpus
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, PointRecord, Shape
from attnprof.scenarios.plan import series, shape_at
from attnprof.reports.capacity import (BUDGETS_GIB, GPU_CACHE_FILE, GPU_MODEL, MAX_EXP, MIN_EXP, add_gpu_predictions,
                                       capacity, default_gpu_predictor, gpu_fingerprint)
from attnprof.reports.data import load
from attnprof.reports.render import render_report
from attnprof.scenarios.scenario import Scenario
from attnprof.profiler.memmodel.blas_workspaces import ENV as BLAS_ENV

from conftest import Page, synthetic_record, write_run
from gpu_samples import TINY_CARD_TOML

MiB = 1 << 20
LENGTHS = [1 << e for e in range(MIN_EXP, MAX_EXP + 1)]  # what the report searches: 16 .. 1M

GPU_FILE = TINY_CARD_TOML + """
[gpus.small]
name = "Small test GPU"
memory_bytes = 4_294_967_296         # 4 GiB
bandwidth_bytes_per_s = 1.0e11
compute_capability = "9.0"
sm_count = 16
tflops = { fp32 = 1.0, tf32 = 2.0, bf16 = 4.0, fp16 = 4.0 }
context_bytes = 134_217_728
source = "a test GPU"
"""
# full is quadratic, sdpa linear (memory-efficient kernel in fp32): boundaries well inside 16 .. 1M
SCENARIO = Scenario(name="gpus", variants=("full", "sdpa"), scope="attention", seq_lens=(256,), d_model=64, heads=4,
                    layers=1, batch=16)  # batch 16: a 1 GiB GPU holds what 64 MiB held at batch 1


@pytest.fixture(autouse=True)
def model_defaults(monkeypatch):
    for var in (ENV_VAR, "ATTNPROF_SDPA_BACKEND", "TORCH_CUDNN_SDPA_DEPRIORITIZED", *BLAS_ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def gpu_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpus") / "tiny.toml"
    path.write_text(GPU_FILE, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def gpus(gpu_file):
    return resolve_gpus(["tiny", "small"], [gpu_file])


def at(template: Point, n: int) -> Point:
    return Point(template.variant, template.mode, template.scope, shape_at(SCENARIO, n), template.forward_only)


@pytest.fixture(scope="module")
def direct(gpus) -> dict:
    """(variant, GPU key) -> the longest power of two in 16 .. 1M that the GPU model says
    fits (the allocator never runs out, total within the GPU's memory): a direct search
    over every length, no bisection, no cache."""
    out = {}
    for s in series(SCENARIO):
        template = s[0]
        fitting = {g.key: [] for g in gpus}
        for n in LENGTHS:
            traces = TraceCache()
            for g in gpus:
                r = predict_gpu(at(template, n), g, traces)
                if r.fits and r.total_bytes <= g.memory_bytes:
                    fitting[g.key].append(n)
        for key, ns in fitting.items():
            out[(template.variant, key)] = max(ns, default=0)
    return out


def run_folder(tmp_path, name="run"):
    """The scenario's points at 256 tokens, as a CPU sweep records them."""
    records = []
    for s in series(SCENARIO):
        peak = predict(s[0], count_flops=False).peak_bytes
        records.append(PointRecord.for_point(s[0], status="ok", predicted_peak_bytes=peak, measured_peak_bytes=peak,
                                             measured_by="tensor-tracker", warmup=1, repeats=1))
    return write_run(tmp_path / name, records)


def test_the_boundaries_lie_inside_the_searched_range_and_differ_per_gpu(direct):
    """The premise of the tests below: every boundary is decided inside 16 .. 1M, and the
    bigger GPU fits a longer sequence."""
    for variant in SCENARIO.variants:
        tiny, small = direct[(variant, "tiny")], direct[(variant, "small")]
        assert MIN_EXP < tiny.bit_length() - 1 < MAX_EXP and MIN_EXP < small.bit_length() - 1 < MAX_EXP
        assert tiny < small, (variant, tiny, small)


def test_the_report_modelling_for_itself_finds_the_direct_boundaries(tmp_path, gpus, direct):
    run = load(run_folder(tmp_path))
    cap = capacity(run.frame, run.path, seconds=120, gpus=gpus)
    assert cap.calls > 0 and not cap.problems and list(cap.budgets) == ["tiny", "small"]
    for variant in SCENARIO.variants:
        for g in gpus:
            fit = cap.fits[(variant, "attention")][g.key]
            assert fit.length == direct[(variant, g.key)] and fit.verified, (variant, g.key)
            figures = cap.model[(variant, "attention", g.key)]
            assert figures[fit.length]["gpu_total_bytes"] <= g.memory_bytes and figures[fit.length]["gpu_fits"]
            up = figures[2 * fit.length]  # the next length up was modelled: it decides the boundary
            assert not up["gpu_fits"] or up["gpu_total_bytes"] > g.memory_bytes
    assert (run.path / GPU_CACHE_FILE).is_file()

    def refuse(point, specs):
        raise AssertionError("should have come from the cache")

    again = capacity(run.frame, run.path, seconds=120, gpus=gpus, gpu_predictor=refuse)
    assert again.calls == 0 and again.fits == cap.fits


def test_the_sweeps_gpu_predictions_decide_the_report_without_modelling(tmp_path, gpus, direct):
    """The sweep's capacity phase (gpu_capacity_predictions) writes the model's figures per
    (GPU, point) into the run folder; the report then calls no predictor at all."""
    entries = gpu_capacity_predictions(SCENARIO, gpus, start=16)
    assert {gpu for gpu, _ in entries} == {"tiny", "small"}
    assert len(entries) < len(LENGTHS) * 2 * len(gpus)  # a search, not every length
    run = load(run_folder(tmp_path))
    add_gpu_predictions(run.path, gpus, entries)

    def refuse(point, specs):
        raise AssertionError(f"modelled {point.variant} at {point.shape.seq_len}: not from the cache")

    cap = capacity(run.frame, run.path, seconds=60, gpus=gpus, gpu_predictor=refuse)
    assert cap.calls == 0 and not cap.problems
    for variant in SCENARIO.variants:
        for g in gpus:
            fit = cap.fits[(variant, "attention")][g.key]
            assert fit.length == direct[(variant, g.key)] and fit.verified, (variant, g.key)


def test_the_page_names_each_gpu_its_memory_and_its_longest_length(tmp_path, gpus, direct):
    run = run_folder(tmp_path)
    text = render_report(run, seconds=120, gpus=gpus).read_text(encoding="utf-8")
    fits = text[text.index('<section id="fits"'):text.index('<section id="charts"')]
    for g, memory in zip(gpus, ("1.00 GiB", "4.00 GiB")):
        assert f'<th class="text">{g.key}</th><td class="text">{g.name}</td><td>{memory}</td>' in fits
    assert GPU_MODEL in fits and "CUDA context" in fits
    assert " GiB</th>" not in fits and "about the memory of" not in fits  # not the generic budgets
    sdpa_tiny = direct[("sdpa", "tiny")]
    assert f"<td>{sdpa_tiny // 1024}K</td><td class=\"text\">sdpa (attention)</td>" in fits
    # the per-variant model table: each GPU's longest length for full, which sdpa outlasts
    for g in gpus:
        n = direct[("full", g.key)]
        assert f'<th class="text">full</th><td class="text">attention</td><td class="text">{g.key}</td>' \
               f'<td>{n if n < 1024 else f"{n // 1024}K"}</td>' in fits
    assert GPU_MODEL in text[text.index('<section id="charts"'):]  # the capacity chart's caption
    assert (run / "report-capacity.png").is_file()


def test_without_gpus_the_report_keeps_the_generic_budgets(tmp_path):
    run = run_folder(tmp_path)
    text = render_report(run, seconds=0).read_text(encoding="utf-8")
    fits = text[text.index('<section id="fits"'):text.index('<section id="charts"')]
    assert all(f"<th class=\"text\">{b} GiB</th>" in fits for b in BUDGETS_GIB) and GPU_MODEL not in fits
    assert not (run / GPU_CACHE_FILE).exists()


def test_without_time_the_gpu_figures_are_extrapolated_and_marked(tmp_path, gpus):
    run = load(run_folder(tmp_path))
    cap = capacity(run.frame, run.path, seconds=0, gpus=gpus)
    assert cap.calls == 0
    assert all(f is None for fits in cap.fits.values() for f in fits.values())  # nothing modelled: '?'
    text = render_report(run.path, seconds=0, gpus=gpus).read_text(encoding="utf-8")
    assert "<td>?</td>" in text


def test_plugin_labels_are_never_modelled(tmp_path, gpus):
    records = [synthetic_record(v, "plain", n) for v in ("canary_mod:Evil", "sdpa") for n in (256, 512)]
    run = load(write_run(tmp_path / "run", records))
    seen = []

    def model(point, specs):
        seen.append(point.variant)
        return default_gpu_predictor(point, specs)

    cap = capacity(run.frame, run.path, seconds=60, gpus=gpus, gpu_predictor=model)
    assert "canary_mod:Evil" not in seen and "sdpa" in seen
    assert "not a built-in variant" in cap.problems[("canary_mod:Evil", "plain")]
    assert "canary_mod" not in sys.modules
    with pytest.raises(UserError, match="not a built-in variant"):
        default_gpu_predictor(Point("canary_mod:Evil", "plain", "model", Shape(seq_len=256, d_model=64, heads=4)),
                              gpus)


def test_a_cache_is_used_only_for_the_same_gpu_and_never_trusted_blindly(tmp_path, gpus, gpu_file):
    run = load(run_folder(tmp_path))
    capacity(run.frame, run.path, seconds=60, gpus=gpus)
    cache = json.loads((run.path / GPU_CACHE_FILE).read_text())
    assert set(cache) == {gpu_fingerprint(g) for g in gpus}
    # the same key with another memory size is another GPU: its figures are not reused
    bigger = gpu_file.parent / "bigger.toml"
    bigger.write_text(GPU_FILE.replace("67_108_864", "134_217_728"), encoding="utf-8")
    (tiny2,) = resolve_gpus(["tiny"], [bigger])
    assert gpu_fingerprint(tiny2) != gpu_fingerprint(gpus[0])
    seen = []

    def model(point, specs):
        seen.append([g.key for g in specs])
        return default_gpu_predictor(point, specs)

    capacity(run.frame, run.path, seconds=60, gpus=[tiny2], gpu_predictor=model)
    assert seen
    # a malformed or hostile cache file counts as no cache
    for junk in ("[1, 2]", "{\"tiny:x\": {\"k\": {\"gpu_total_bytes\": \"lots\", \"gpu_fits\": true}}}",
                 "{" * 100_000, json.dumps({gpu_fingerprint(gpus[0]): {"k": {"gpu_total_bytes": 1, "gpu_fits": 1}}})):
        (run.path / GPU_CACHE_FILE).write_text(junk, encoding="utf-8")
        fresh = capacity(run.frame, run.path, seconds=60, gpus=gpus)
        assert fresh.calls > 0 and not fresh.problems


def test_hostile_strings_in_a_gpu_file_are_text_in_the_page(tmp_path):
    name, source = "</td><script>alert(1)</script> $\\frac{1}{2}$", '"><img src=x onerror=alert(2)>'
    hostile = tmp_path / "hostile <gpus> & 'x'.toml"
    hostile.write_text(GPU_FILE.replace("Tiny test GPU", name.replace("\\", "\\\\").replace('"', '\\"'))
                       .replace('source = "a test GPU"', f"source = '{source}'", 1), encoding="utf-8")
    specs = resolve_gpus(["tiny", "small"], [hostile])
    assert specs[0].name == name and specs[0].source == source
    text = render_report(run_folder(tmp_path), seconds=30, gpus=specs).read_text(encoding="utf-8")
    page = Page(text)
    assert "script" not in page.tags and all(not k.startswith("on") for k, _ in page.attrs)
    # the memory, capacity and memory-over-a-step charts (no times here; the last has a budget of its own)
    assert page.tags.count("img") == 3 and 'id="timeline"' in text
    shown = "".join(page.text)
    assert name in shown and GPU_MODEL in shown


# --- the command line: sweep and report take --gpu / --gpu-file --------------------------------------
def attnprof(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", ["sweep", "report"])
def test_an_unknown_gpu_is_one_line_and_exit_2(tmp_path, command, gpu_file):
    args = ["sweep", "--out", str(tmp_path / "new"), "--device", "cpu"] if command == "sweep" else \
        ["report", str(write_run(tmp_path / "run", [synthetic_record("sdpa", "plain", 256)]))]
    result = attnprof(*args, "--gpu", "tiny", "--gpu", "no-such-gpu", "--gpu-file", str(gpu_file))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown GPU 'no-such-gpu'") and "tiny" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "new").exists() and not (tmp_path / "run" / "report.html").exists()
    with pytest.raises(UserError, match="unknown GPU"):
        (api.sweep if command == "sweep" else api.report)(*([] if command == "sweep" else [tmp_path / "run"]),
                                                          gpus=["no-such-gpu"])


@pytest.mark.slow
def test_sweep_and_report_with_gpus_from_the_command_line(tmp_path, gpu_file, direct):
    """A real (tiny) CPU sweep with --gpu: its report is per GPU, from the sweep's own model
    figures (none made by the report), and results.jsonl keeps one record per point with
    no GPU figures in it; `attnprof report --gpu` with ATTNPROF_GPUS renders the same."""
    out = tmp_path / "run"
    result = attnprof("sweep", "--variant", "full,sdpa", "--scope", "attention", "--seq-len", "256",
                      "--d-model", "64", "--heads", "4", "--batch", "16", "--device", "cpu", "--repeats", "1",
                      "--warmup", "0", "--gpu", "tiny", "--gpu", "small", "--gpu-file", str(gpu_file), "--out", str(out),
                      "--quiet")
    assert result.returncode == 0, result.stderr
    assert "GPU memory model" in result.stderr and "tiny, small" in result.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["gpu_total_bytes"] is None for r in records)
    text = (out / "report.html").read_text(encoding="utf-8")
    assert "0 model prediction(s) ran for this render" in text  # all from the sweep's capacity phase
    for g in ("tiny", "small"):
        assert f'<th class="text">{g}</th>' in text
    again = attnprof("report", str(out), "--gpu", "small", "--output", str(tmp_path / "small.html"),
                     env={ENV_VAR: str(gpu_file)})
    assert again.returncode == 0, again.stderr
    page = (tmp_path / "small.html").read_text(encoding="utf-8")
    fits = page[page.index('<section id="fits"'):page.index('<section id="charts"')]
    assert "Small test GPU" in fits and "4.00 GiB" in fits and "Tiny test GPU" not in fits
    n = direct[("sdpa", "small")]
    assert f"<td>{n // 1024}K</td><td class=\"text\">sdpa (attention)</td>" in fits


def test_a_gpu_over_a_builtin_key_and_its_name_print_as_such_in_the_report(tmp_path):
    """A user's file that replaces h100-sxm (here with a 1 GiB card whose name holds an ESC
    sequence and a newline): the page never passes it off as the datasheet's GPU, and the
    name's control characters are spelled out."""
    path = tmp_path / "fake.toml"
    path.write_text(GPU_FILE.split("[gpus.small]")[0].replace("[gpus.tiny]", "[gpus.h100-sxm]")
                    .replace('"Tiny test GPU"', r'"Fake\u001b[31m\nH100"'), encoding="utf-8")
    text = render_report(run_folder(tmp_path), seconds=0, gpus=resolve_gpus(["h100-sxm"], [path])).read_text()
    assert f"h100-sxm (from {path}, overrides built-in)" in text
    assert "\x1b" not in text and r"Fake\x1b[31m\nH100" in text


def test_the_page_says_how_sure_the_gpu_model_is_per_series_and_gpu(tmp_path, gpus):
    """The built-in H200 was measured (sdpa in fp32 at scope attention among its kinds, full
    only in bf16); a test GPU never was: each says so, as text, beside the GPU model's figures."""
    specs = resolve_gpus(["h200"]) + list(gpus[:1])
    text = render_report(run_folder(tmp_path), seconds=0, gpus=specs).read_text(encoding="utf-8")
    fits = text[text.index('<section id="fits"'):text.index('<section id="charts"')]
    assert "not checked on a real GPU: full attention none float32 was not measured" in fits
    assert "checked on a real NVIDIA H200 (torch 2.11" in fits and "not among those measured" in fits
    assert "not checked on a real GPU: tiny was never measured (measured: h200)" in fits
