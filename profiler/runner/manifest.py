"""The run folder's manifest.json: the full configuration and the environment."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from attnprof import __version__
from attnprof.profiler import safeio
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.storage import MANIFEST_FILE, read_manifest, read_manifest_checked
from attnprof.profiler.units import strict_json
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
        from attnprof.profiler.measure.host import device_environment

        env.update(device_environment(device))
    except ImportError:
        pass
    if env["device"] == "cpu":  # name the processor, not just "cpu"
        env["device_name"] = env.get("cpu") or platform.processor() or "cpu"
    env.setdefault("device_name", "")
    return env


def write_manifest(out_dir: Path, scenario: Scenario, settings, cluster: Optional[dict] = None) -> dict:
    """Write manifest.json atomically (``manifest.json.tmp``, then rename; never through a
    planted link: ``safeio.write_atomic``); on a write error the temporary file is removed
    and the old manifest stays as it was.

    ``cluster`` (the executor's ``describe()``): where the points run, the executor, its
    slots, and each node with its devices; ``environment`` stays this process's own."""
    manifest = {
        "format": "attnprof-run",
        "version": 1,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "scenario": scenario.to_dict(),
        "settings": {k: v for k, v in settings.__dict__.items() if k != "test_hook"},
        "environment": environment(settings.device),
    }
    if cluster is not None:
        manifest["cluster"] = cluster
    previous = read_manifest(out_dir)
    if previous:
        created, resumed = previous.get("created_at"), previous.get("resumed_at")
        manifest["created_at"] = created if isinstance(created, str) else manifest["created_at"]
        manifest["resumed_at"] = [r for r in resumed if isinstance(r, str)] if isinstance(resumed, list) else []
        manifest["resumed_at"].append(datetime.now(timezone.utc).isoformat(timespec="seconds"))
    settings.device_name = manifest["environment"].get("device_name", "")
    manifest["settings"]["device_name"] = settings.device_name
    safeio.write_atomic(Path(out_dir) / MANIFEST_FILE, strict_json(manifest, indent=1, default=str).encode("utf-8"))
    return manifest


def check_manifest_readable(out_dir: Path) -> dict:
    """The manifest of a folder to resume ({} when there is none); SweepError in one line,
    with the way out, when it is there but corrupt."""
    manifest, problem = read_manifest_checked(out_dir)
    if problem:
        raise SweepError(f"cannot resume {out_dir}: {problem}; move it aside (resume then goes by the records "
                         f"alone) or choose another --out")
    return manifest


def check_resumable(out_dir: Path, scenario: Scenario, device: str, records: list[dict] = ()) -> None:
    """Refuse to resume a folder measured on another device or with another scenario, or
    one whose manifest is corrupt (the manifest says what was run; resuming past a corrupt
    one would overwrite it and lose what it said).

    Only compares data: nothing named in the manifest or the records (a variant label
    such as ``package.module:Class``) is parsed or imported here. What runs is decided
    by the scenario given now. Without a manifest the records' own ``device`` fields
    are compared.
    """

    manifest = check_manifest_readable(out_dir)
    before = manifest.get("settings", {}).get("device")
    if not isinstance(before, str):
        before = next((r["device"] for r in records if r.get("device") != device), None)
    if before and before != device and device != "auto":  # auto: on a cluster, checked once it is resolved
        raise SweepError(f"cannot resume {out_dir} on {device}: it was measured on {_short(before)}")
    previous = manifest.get("scenario")
    if previous is None:
        return
    now = scenario.to_dict()
    diffs = [k for k in now if k not in _VOLATILE and previous.get(k) != now[k]]
    if diffs:
        key = diffs[0]
        raise SweepError(f"cannot resume {out_dir}: it was run with {key}={_short(previous.get(key))}, "
                         f"now {_short(now[key])}")


def _short(value) -> str:
    """A value from the manifest for a one-line message: its repr on one line, at most 80 characters."""
    try:
        text = " ".join(repr(value).split())
    except RecursionError:  # a hostile manifest can nest lists deeper than repr can go
        text = "(deeply nested data)"
    return text if len(text) <= 80 else text[:77] + "..."
