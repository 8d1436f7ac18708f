"""The run folder's manifest.json: the full configuration and the environment."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from attnprof import __version__
from attnprof.profiler.runner.storage import MANIFEST_FILE, read_manifest
from attnprof.scenarios.scenario import Scenario

# Scenario fields that may differ between a run and its --resume without changing any point.
_VOLATILE = {"source", "description", "repeats", "warmup", "point_timeout_s"}


def git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment(device: str) -> dict:
    import torch

    env = {
        "attnprof_version": __version__,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "git_commit": git_commit(),
        "device": "cuda" if device.startswith("cuda") else "cpu",
        "torch_threads": torch.get_num_threads(),
    }
    try:
        from attnprof.profiler.measure.gpu import device_environment

        env.update(device_environment(device))
    except ImportError:
        pass
    if env["device"] == "cpu":  # name the processor, not just "cpu"
        env["device_name"] = env.get("cpu") or platform.processor() or "cpu"
    env.setdefault("device_name", "")
    return env


def write_manifest(out_dir: Path, scenario: Scenario, settings) -> dict:
    manifest = {
        "format": "attnprof-run",
        "version": 1,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "scenario": scenario.to_dict(),
        "settings": {k: v for k, v in settings.__dict__.items() if k != "test_hook"},
        "environment": environment(settings.device),
    }
    previous = read_manifest(out_dir)
    if previous:
        manifest["created_at"] = previous.get("created_at", manifest["created_at"])
        manifest["resumed_at"] = previous.get("resumed_at", []) + [datetime.now(timezone.utc).isoformat(timespec="seconds")]
    settings.device_name = manifest["environment"].get("device_name", "")
    manifest["settings"]["device_name"] = settings.device_name
    tmp = Path(out_dir) / (MANIFEST_FILE + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, Path(out_dir) / MANIFEST_FILE)
    return manifest


def check_resumable(out_dir: Path, scenario: Scenario, device: str) -> None:
    from attnprof.profiler.runner.sweep import SweepError

    manifest = read_manifest(out_dir)
    before = manifest.get("settings", {}).get("device")
    if before and before != device:
        raise SweepError(f"cannot resume {out_dir} on {device}: it was measured on {before}")
    previous = manifest.get("scenario")
    if previous is None:
        return
    now = scenario.to_dict()
    diffs = [k for k in now if k not in _VOLATILE and previous.get(k) != now[k]]
    if diffs:
        key = diffs[0]
        raise SweepError(f"cannot resume {out_dir}: it was run with {key}={previous.get(key)!r}, now {now[key]!r}")
