"""scripts/gpu_report.py: the GPU check's folder, from another machine, into Markdown."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_report.py"


def folder(tmp_path: Path, device: str = "NVIDIA H200") -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.txt").write_text("environment: ok (3 s) - NVIDIA H200\nsweep: ok (80 s)\n")
    (out / "comparison.csv").write_text("variant,mode,seq_len,status,measured_over_predicted\n"
                                        "sdpa|<b>x</b>,plain,4096,ok,1.02\n")
    env = json.dumps({"device_name": device, "torch": "2.11.0+cu130", "cudnn": 91900,
                      "sdpa_backends": {"bfloat16/d64": {"torch": "cudnn", "model": "cudnn"}}}).encode()
    with tarfile.open(out / "gpu-check.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("./environment.json")
        info.size = len(env)
        tar.addfile(info, io.BytesIO(env))
    return out


def run(out: Path, doc: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--doc", str(doc)], capture_output=True, text=True)


def test_the_page_names_the_device_and_escapes_what_it_was_sent(tmp_path):
    doc = tmp_path / "measured-gpu.md"
    done = run(folder(tmp_path, device="NVIDIA H200\x1b[31m"), doc)
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    assert text.startswith("# Measured on a GPU: NVIDIA H200") and "2.11.0+cu130" in text and "\x1b" not in text
    assert "sdpa\\|\\<b\\>x\\</b\\>" in text  # a pipe or a tag in a cell is text, not table or markup
    assert "| bfloat16/d64 | cudnn | cudnn |" in text
    assert "(no gpu-model.csv: the stage did not finish)" in text


def test_a_planted_link_is_refused_in_one_line(tmp_path):
    out = folder(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (out / "summary.txt").unlink()
    (out / "summary.txt").symlink_to(secret)
    done = run(out, tmp_path / "doc.md")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a regular file" in done.stderr


def test_several_calls_in_one_folder_are_read_by_their_prefix(tmp_path):
    out = folder(tmp_path)
    for name in ("summary.txt", "comparison.csv", "gpu-check.tgz"):
        (out / name).rename(out / f"call2-{name}")
    (out / "call2-models-vs-measured.csv").write_text("point,allocated_ratio,time_ratio\nsdpa model plain,1.1,2.0\n")
    doc = tmp_path / "doc.md"
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--doc", str(doc), "--prefix", "call2-"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    assert "NVIDIA H200" in text and "sweep: ok (80 s)" in text
    assert "| sdpa model plain |" in text and "MODELS vs every ok GPU point" in text
    refused = subprocess.run([sys.executable, str(SCRIPT), str(out), "--doc", str(doc), "--prefix", "../x"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
