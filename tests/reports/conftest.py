"""Run folders for report tests, written through the same API a sweep uses
(``append_record`` + ``manifest.json``), so a real sweep's folder can stand in for them."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import MANIFEST_FILE, append_record

CI_VARIANTS = ("full", "sdpa", "lsh", "lsh[n_hashes=8]", "sparse_strided", "sparse_fixed", "sliding_window")
CI_MODES = ("plain", "checkpoint", "reversible")
CI_LENGTHS = (256, 512, 1024)  # the `ci` preset's lengths
MEMORY_EXPONENT = {"full": 2.0, "sdpa": 1.0, "lsh": 1.0, "sparse_strided": 1.5, "sparse_fixed": 1.5,
                   "sliding_window": 1.0}
MODE_FACTOR = {"plain": 1.0, "checkpoint": 0.6, "reversible": 0.45, "none": 0.3}  # synthetic savings


def synthetic_record(variant: str, mode: str, n: int, *, status: str = "ok", reason: str = "",
                     scale: float = 1.0, scope: str = "model") -> PointRecord:
    """A plausible CPU record: peak = linear stack terms + the attention's n**e term;
    measured equals predicted to the byte, as it does on CPU."""
    e = MEMORY_EXPONENT.get(variant.split("[")[0], 2.0)
    mode = "none" if scope == "attention" else mode
    peak = int(scale * MODE_FACTOR[mode] * (40_000 * n + 64 * n ** e))
    time_ms = scale * 0.002 * n ** (e / 1.2 + 0.1)
    ok = status == "ok"
    return PointRecord(
        variant=variant, mode=mode, scope=scope, seq_len=n, batch=1, d_model=64, heads=4, head_dim=16,
        layers=2, dtype="float32", status=status, reason=reason, predicted_peak_bytes=peak,
        measured_peak_bytes=peak if ok else None, measured_by="tensor-tracker" if ok else "",
        time_fwd_ms=time_ms / 3 if ok else None, time_bwd_ms=2 * time_ms / 3 if ok else None,
        warmup=1, repeats=2, finished_at="2025-01-01T00:00:00")


# The layout attnprof.profiler.runner.manifest.write_manifest writes.
MANIFEST = {
    "format": "attnprof-run", "version": 1, "created_at": "2025-01-01T00:00:00+00:00",
    "command": ["attnprof", "sweep", "--scenario", "ci"],
    "scenario": {"name": "ci", "scope": "model", "min_len": 256, "max_len": 1024, "d_model": 64, "heads": 4,
                 "layers": 2, "dtype": "float32", "modes": list(CI_MODES)},
    "settings": {"device": "cpu", "warmup": 1, "repeats": 2, "point_timeout_s": 120.0},
    "environment": {"attnprof_version": "0.1.0", "torch_version": "2.13.0+cpu", "cuda_version": None,
                    "hostname": "test-host", "git_commit": "0123abc", "device": "cpu", "device_name": "test CPU",
                    "device_memory_bytes": None, "driver": None, "cpu": "2-core test CPU"},
}


def write_run(run_dir: Path, records, manifest: dict | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    for record in records:
        append_record(run_dir, record)
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest or MANIFEST, indent=2), encoding="utf-8")
    return run_dir


def ci_records(variants=CI_VARIANTS, modes=CI_MODES, lengths=CI_LENGTHS, **kw):
    for variant in variants:
        for mode in modes:
            for n in lengths:
                oom = variant == "full" and mode == "plain" and n == max(lengths)
                yield synthetic_record(variant, mode, n, status="oom" if oom else "ok",
                                       reason="CUDA out of memory. Tried to allocate 2.00 GiB" if oom else "", **kw)


@pytest.fixture
def ci_run(tmp_path) -> Path:
    """A ci-sized run: 3 lengths x 6 variants x 3 modes, one OOM."""
    return write_run(tmp_path / "run", ci_records())


class Page(HTMLParser):
    """Tags, attributes and the text a browser would show."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)
