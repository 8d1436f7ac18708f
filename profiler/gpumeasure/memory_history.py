"""The REAL memory snapshot of a point on a GPU (``sweep --device cuda --timeline``): the CUDA
caching allocator's own history of the measured step, in the format pytorch.org/memory_viz
opens, beside the predicted one (``predict --timeline``) to compare event by event.

Why torch's recorder and not ours: on a GPU the allocator is the truth (segments, blocks,
the kernels' workspaces), and ``torch.cuda.memory._record_memory_history`` records exactly
it. ``MemoryHistory`` turns the recorder on just before the measured step and takes
``torch.cuda.memory._snapshot()`` right after (also when the step ran out of memory: that
snapshot is the one a user wants most), then turns it off. We pickle the snapshot
ourselves (protocol 4: the viewer's unpickler reads 2-4) and write it with
``safeio.write_atomic``, never through a planted link, instead of ``_dump_snapshot``,
which opens the path with ``open(path, "wb")`` and follows one.

The recorder keeps host-side stack records only: it allocates no device memory, so the
allocator's peak (``measured_peak_bytes``) is the same with it on. The CPU path never
comes here (the worker calls this only for a CUDA device).

File names: the predicted files' own (profiler/timeline/files.py ``file_name``, given by
the worker): one safe name per point (a variant label from a file is data), so a real
snapshot and its prediction share a name up to the suffix.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Optional

from attnprof.profiler import safeio

TIMELINES_DIR = "timelines"  # RUN/timelines/, beside results.jsonl
REAL_SUFFIX = ".real.memory.pickle"
# Trace entries the recorder keeps (a ring buffer: the oldest go first). A step of the GPU
# check's points makes a few thousand allocations and frees; 100k keeps every one of a
# 64K-token point's and bounds the file (~200 B an entry before compression).
DEFAULT_MAX_ENTRIES = 100_000
PICKLE_PROTOCOL = 4  # torch/utils/viz/MemoryViz.js unpickles protocols 2-4 only


def real_snapshot_path(folder: Path, name: str) -> Path:
    """Where a point's real snapshot goes: ``name`` is its predicted files' name
    (profiler/timeline/files.py ``file_name``), so the pair sits side by side."""
    return Path(folder) / (name + REAL_SUFFIX)


def timelines_folder(run_dir: Path) -> Path:
    """``RUN/timelines``, created if absent; LinkRefused when it is a link or not a folder
    (files written into a planted link to a folder would land outside the run)."""
    return safeio.make_folder(Path(run_dir) / TIMELINES_DIR)


class MemoryHistory:
    """A context manager around a measured CUDA step: the allocator's recorder on at enter;
    at exit ``snapshot`` is ``torch.cuda.memory._snapshot()`` (plain dicts and lists) and
    the recorder is off again, whether the step returned or raised."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, device=None):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive integer, got {max_entries!r}")
        self.max_entries, self.device = max_entries, device  # device: the one the step runs on (None: current)
        self.snapshot: Optional[dict] = None
        self.problem = ""  # why there is no snapshot, when there is none

    def __enter__(self) -> "MemoryHistory":
        import torch

        # stacks="python": C++ frames would cost seconds of unwinding per step and add nothing
        # the viewer needs to name our ops; clear_history: this step's events alone.
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                 max_entries=self.max_entries, device=self.device,
                                                 clear_history=True)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        try:
            self.snapshot = torch.cuda.memory._snapshot()
        except Exception as error:  # noqa: BLE001 - the measurement stands without its snapshot
            self.problem = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)


def snapshot_bytes(snapshot: dict) -> bytes:
    """The snapshot as the viewer reads it: pickle protocol 4."""
    return pickle.dumps(snapshot, protocol=PICKLE_PROTOCOL)


def write_real_snapshot(folder: Path, name: str, history: MemoryHistory) -> tuple[Optional[Path], str]:
    """Write ``history``'s snapshot for the point into ``folder``: (its path, '') or (None, why not).
    Never raises for the file: a point's measurement outweighs its snapshot."""
    if history.snapshot is None:
        return None, f"no real memory snapshot ({history.problem or 'none taken'})"
    path = real_snapshot_path(folder, name)
    try:
        safeio.write_atomic(path, snapshot_bytes(history.snapshot))
    except (OSError, safeio.LinkRefused) as exc:
        return None, f"real memory snapshot not written: {' '.join(str(exc).split())[:200]}"
    return path, ""
