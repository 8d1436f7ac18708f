"""scripts/gpu_step_profile.py: whole steps under torch.profiler (run here on the CPU at tiny
sizes: the script's shape and its refusals, not the GPU's figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_step_profile.py"
TINY = ["--device", "cpu", "--d-model", "32", "--heads", "2", "--layers", "1", "--dtype", "float32",
        "--warmup", "0", "--repeats", "2"]


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_a_cpu_run_profiles_each_step_and_counts_its_aten_ops(tmp_path):
    out = tmp_path / "steps.json"
    r = _run("--out", str(out), "--points", "sdpa:plain:64,full:checkpoint:64", *TINY)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("HEADLINE: 2 of 2 steps profiled")
    doc = json.loads(out.read_text())
    assert "not modelled" in doc["what"] and doc["device"] == "cpu" and doc["shape"]["d_model"] == 32
    plain, checkpointed = doc["points"]
    assert (plain["variant"], plain["mode"], plain["seq_len"]) == ("sdpa", "plain", 64)
    assert len(plain["step_ms_samples"]) == 2 and plain["step_ms"] > 0
    assert plain["kernel_launches"] == 0 and plain["kernel_span_ms"] is None  # no kernels on a CPU
    names = {o["name"] for o in plain["ops"]}
    assert "aten::mm" in names or "aten::addmm" in names
    assert checkpointed["aten_ops"] > 0 and checkpointed["mode"] == "checkpoint"


def test_checkpointing_runs_more_ops_than_the_plain_step(tmp_path):
    out = tmp_path / "steps.json"
    r = _run("--out", str(out), "--points", "full:plain:64,full:checkpoint:64", *TINY)
    assert r.returncode == 0, r.stderr
    plain, checkpointed = json.loads(out.read_text())["points"]
    assert checkpointed["aten_ops"] > plain["aten_ops"]


def test_a_kernel_name_gets_a_coarse_kind():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from gpu_step_profile import kind_of
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert kind_of("void cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert kind_of("void at::native::(anonymous namespace)::cunn_SoftMaxForwardSmem<8, c10::BFloat16>") == "softmax"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>") == "elementwise"
    assert kind_of("some_kernel") == "other"


def test_a_bad_point_is_refused_in_one_line_before_any_runs(tmp_path):
    for bad, said in (("sdpa:plain:x", "invalid literal"), ("bogus:plain:64", "unknown variant"),
                      ("sdpa:plan:64", "mode 'plan'"), ("sdpa:64", "VARIANT:MODE:LENGTH")):
        r = _run("--out", str(tmp_path / "s.json"), "--points", f"sdpa:plain:64,{bad}", *TINY)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, (bad, r.stderr)
        assert not (tmp_path / "s.json").exists() and "HEADLINE" not in r.stdout
