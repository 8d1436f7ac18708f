"""Where a sweep runs: ``resolve_device`` (auto -> cuda or cpu, before anything starts)
and ``run_by_gpu_type`` (``--gpu-types``: the same sweep once per GPU type of a Ray
cluster, each into its own run folder). The sweep itself is ``sweep.run_sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler import safeio
from attnprof.profiler.runner.errors import SweepError
from attnprof.profiler.runner.sweep import SweepSettings, SweepSummary, run_sweep
from attnprof.scenarios.scenario import Scenario


def resolve_device(device: str) -> str:
    """auto -> cuda or cpu. Asked without initialising CUDA here (gpumeasure/devices.py): this
    process forks prediction workers, which a CUDA query would poison."""
    from attnprof.profiler.gpumeasure import devices

    if device == "auto":
        return "cuda" if devices.cuda_available() else "cpu"
    if device.startswith("cuda"):
        if not devices.cuda_available():
            import torch

            why = devices.probe().get("error") if devices.cuda_compiled() else "a CPU build of torch"
            raise SweepError(f"--device {device}: no CUDA device is available (torch {torch.__version__}"
                             f"{': ' + why if why else ''})")
        return device
    if device != "cpu":
        raise SweepError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return device


GPU_TYPES_FILE = "gpu-types.json"


def check_gpu_types(settings: SweepSettings) -> None:
    """``--gpu-types``' own refusals, made before the banner (api.sweep) and again here."""
    if settings.executor != "ray":
        raise SweepError(f"--gpu-types needs --executor ray, not --executor {settings.executor}")
    if settings.device not in ("auto", "cuda"):
        raise SweepError(f"--gpu-types runs on GPUs: use --device cuda, not {settings.device}")


def run_by_gpu_type(scenario: Scenario, out_dir: Path, settings: SweepSettings, gpu_types: list[str], *,
                    resume: bool = False, show_progress: bool = True,
                    on_record: Optional[Callable[[dict], None]] = None) -> tuple[SweepSummary, list[Path]]:
    """``--gpu-types``: the same sweep once per GPU type of the Ray cluster (``all``: every
    type present), each an ordinary run folder ``OUT/<TYPE>/`` whose records name their
    device; ``OUT/gpu-types.json`` lists them. One type after the other, each on every GPU
    of its type; a type that was interrupted stops the rest (``--resume`` completes them).
    -> (the summaries added up, the run folders)."""
    import json
    from dataclasses import replace

    from attnprof.profiler.runner.executors.ray_cluster import RaySession, gpu_types_of

    check_gpu_types(settings)
    out_dir = Path(out_dir)
    session = RaySession.connect(settings.ray_address)
    total = SweepSummary(out_dir)
    folders: list[Path] = []
    try:
        present = gpu_types_of(session.nodes())
        wanted = sorted(present) if [t.lower() for t in gpu_types] == ["all"] else list(dict.fromkeys(gpu_types))
        missing = [t for t in wanted if t not in present]
        if missing or not wanted:
            raise SweepError(f"the Ray cluster has no GPU of type {', '.join(missing) or 'any'}; it has "
                             f"{', '.join(f'{t} x{c}' for t, c in sorted(present.items())) or 'none'}")
        folders = [out_dir / _folder_name(t) for t in wanted]
        out_dir.mkdir(parents=True, exist_ok=True)
        safeio.write_atomic(out_dir / GPU_TYPES_FILE, json.dumps(
            {"gpu_types": {t: f.name for t, f in zip(wanted, folders)}, "gpus": present}, indent=1).encode("utf-8"))
        for gpu_type, folder in zip(wanted, folders):
            part = run_sweep(scenario, folder, replace(settings, device="cuda", gpu_type=gpu_type, device_name=""),
                             resume=resume, show_progress=show_progress,
                             on_record=on_record)
            total.records += part.records
            total.kept += part.kept
            total.wall_s += part.wall_s
            if part.interrupted:
                total.interrupted, total.interrupted_by = True, part.interrupted_by
                break
    finally:
        session.close()
    return total, folders


def _folder_name(gpu_type: str) -> str:
    """A GPU type as a folder name: 'A100-80G' stays, anything odd becomes '_'."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu_type).strip(".")
    return name or "gpu"
