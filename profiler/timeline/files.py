"""A point's two timeline files in a folder that is data: their names, and writing them
(profiler/safeio.py: no planted link is followed; the folder checked before any work).

A name is the point's identity, readable and safe: ``[A-Za-z0-9._=-]`` kept, every other
byte of its UTF-8 spelled ``%XX`` ('%' too, so two points never share a name), never a
path separator, never a leading dot; cut at ``NAME_BYTES`` with a digest of the point's
key always at the end, so points that print alike still get their own files.
"""

from __future__ import annotations

import hashlib
import string
from pathlib import Path
from typing import Optional

from attnprof.profiler import safeio
from attnprof.profiler.records import Point, later_label

SAFE = frozenset(string.ascii_letters + string.digits + "._=-")
NAME_BYTES = 160
SNAPSHOT_SUFFIX, TRACE_SUFFIX = ".memory.pickle", ".trace.json"


def _escaped(text: str) -> str:
    return "".join(ch if ch in SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                   for ch in text)


def file_name(point: Point, gpu: Optional[str] = None) -> str:
    """The files' common name (no suffix) for ``point`` (on GPU ``gpu``, its table key)."""
    s = point.shape
    words = [point.variant, point.mode, point.scope, f"n{s.seq_len}", f"b{s.batch}", f"L{s.layers}", s.dtype]
    words += ["fwd"] if point.forward_only else []
    later = later_label(point.identity())
    words += [later.replace(" ", "-")] if later else []
    words += [gpu] if gpu else []
    digest = hashlib.sha256((point.key_text() + "|" + (gpu or "")).encode()).hexdigest()[:8]
    body = _escaped("-".join(str(w) for w in words))[:NAME_BYTES]
    if body.startswith("."):
        body = "%2E" + body[1:]
    return f"{body}-{digest}"


def check_folder(folder) -> None:
    """UnwritablePath in one line unless ``folder`` (``predict --timeline DIR``: a folder the user
    named, so probed) can take the files: before any work."""
    safeio.check_folder_writable(Path(folder), "the timeline folder", probe=True)


def write_files(folder, name: str, snapshot_bytes: bytes, trace_bytes: bytes) -> list:
    """Both files into ``folder`` (made if need be), never through a link; their paths."""
    folder = safeio.make_folder(Path(folder), parents=True)
    paths = [folder / (name + SNAPSHOT_SUFFIX), folder / (name + TRACE_SUFFIX)]
    for path, data in zip(paths, (snapshot_bytes, trace_bytes)):
        safeio.write_atomic(path, data)
    return paths


def write_point(folder, point: Point, gpu=None, rates=None) -> list:
    """Predict ``point``'s timeline (on GpuSpec ``gpu``, else with ``rates``) and write its
    two files into ``folder``; their paths."""
    from attnprof.profiler.timeline import chrome_trace, memory_snapshot
    from attnprof.profiler.timeline.build import point_timeline

    timeline = point_timeline(point, gpu=gpu, rates=rates)
    return write_files(folder, file_name(point, gpu.key if gpu is not None else None),
                       memory_snapshot.dumps(memory_snapshot.snapshot(timeline)),
                       chrome_trace.dumps(chrome_trace.trace_events(timeline)))
