"""Tiny synthetic run folders for the gate's tests (test_gate.py, test_snapshot.py,
test_baseline.py): records written with append_record, a manifest.json beside them."""

import json
from pathlib import Path

from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import append_record
from attnprof.scenarios.scenario import Scenario

MiB = 1 << 20
LSH = "lsh[n_hashes=8]"  # an option label: must come back verbatim everywhere
VARIANTS = ("full", LSH)
LENGTHS = (256, 512)


def peak(variant: str, n: int) -> int:
    """Distinct, plausible peaks of several MiB, so 10% is well above the 64 KiB floor."""
    return (40 if variant == "full" else 20) * MiB * n // 256 + 4096


def make_run(path: Path, *, device="cpu", device_name="Test CPU", scenario=None, skip=(), change=None) -> Path:
    """A run folder: every VARIANTS x LENGTHS point (but `skip`), `change[(variant, n)]` fields overridden."""
    path.mkdir(parents=True)
    manifest = {"scenario": {**Scenario(name="ci", d_model=64, heads=4, layers=2).to_dict(), **(scenario or {})},
                "environment": {"device": device, "device_name": device_name}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    method = "cuda-allocator" if device == "cuda" else "tensor-tracker"
    for variant in VARIANTS:
        for n in LENGTHS:
            if (variant, n) in skip:
                continue
            fields = dict(variant=variant, mode="plain", scope="model", seq_len=n, batch=1, d_model=64, heads=4,
                          head_dim=16, layers=2, dtype="float32", device=device, device_name=device_name,
                          predicted_peak_bytes=peak(variant, n), measured_peak_bytes=peak(variant, n),
                          measured_by=method, time_fwd_ms=2.0, time_bwd_ms=3.0)
            fields.update((change or {}).get((variant, n), {}))
            append_record(path, PointRecord(**fields))
    return path
