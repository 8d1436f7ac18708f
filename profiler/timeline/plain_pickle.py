"""Reading a memory snapshot someone else made, without running any of it.

A pickle is a program: ``pickle.load`` of a planted file can call ``os.system``. A
snapshot needs none of that: it is dicts, lists, tuples, strings, numbers, booleans and
None. ``load_plain`` reads with an Unpickler that resolves no global at all (every
``GLOBAL``/``STACK_GLOBAL``, hence every REDUCE/BUILD target, is refused), after a size
bound and a read that follows no link (safeio.read_bounded). Anything else is a
``SnapshotRefused``: one line, exit 2.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from attnprof.errors import UserError
from attnprof.profiler import safeio
from attnprof.profiler.units import printable

MAX_SNAPSHOT_BYTES = 1 << 30  # a real 1-GiB snapshot is huge already
PLAIN = (dict, list, tuple, str, int, float, bool, type(None), bytes)


class SnapshotRefused(UserError):
    """A file that is not a plain-data memory snapshot."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {printable(module)}.{printable(name)}, and a snapshot is plain "
                                     f"data (nothing was run)")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it has a persistent id, and a snapshot is plain data")


def load_plain(path, limit: int = MAX_SNAPSHOT_BYTES) -> dict:
    """The snapshot dict at ``path``; SnapshotRefused (one line) for anything else."""
    path = Path(path)
    where = printable(path)
    try:
        data = safeio.read_bounded(path, limit)
    except ValueError as exc:
        raise SnapshotRefused(f"{where}: {exc}; not read") from None
    except OSError as exc:
        raise SnapshotRefused(f"{where}: {exc.strerror or exc}") from None
    if data is None:
        raise SnapshotRefused(f"{where}: no such file")
    try:
        value = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, RecursionError, MemoryError, OverflowError) as exc:
        raise SnapshotRefused(f"{where}: not a plain-data memory snapshot: {printable(exc)}") from None
    if not isinstance(value, dict) or not isinstance(value.get("device_traces", []), list) \
            or not isinstance(value.get("segments", []), list):
        raise SnapshotRefused(f"{where}: not a memory snapshot (no segments / device_traces)")
    return value
