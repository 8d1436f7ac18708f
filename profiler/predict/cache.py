"""The persistent prediction cache: a repeated ``predict`` or report render is near-instant.

One JSON file per point under ``$ATTNPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnprof``,
else ``~/.cache/attnprof`` (``predictions/<sha256 of the key>.json``). The key holds
everything a prediction depends on: the entry schema, torch's version, attnprof's
version *and a digest of its source files* (a development checkout changes code without
changing the version), the point's identity (``Point.key()``), whose kernels it was traced with
(``Point.kernels``: a GPU's step predicted on the CPU) and the variant's resolved
options. A plug-in variant (``module:Class`` or an entry point) is keyed by its module
file's content as well; one whose file cannot be read is not cached.

An entry is trusted only when it is one: valid JSON with exactly the expected fields, its
key equal to the one asked for (a file from another key, version or machine is
foreign), its checksum right and every figure of the right type. Anything else is
moved aside (``NAME.unreadable-...`` beside it, one warning line) and predicted again: never
overwritten, never deleted. A cache folder that cannot be written costs one warning line on
stderr per process, never the prediction; so does one that is not the user's own
(trust.py: owned by another uid, or writable by others), which is then neither read nor
written, since a checksum cannot tell who wrote an entry (docs/accounting.md). Entries are written to a temporary file and
renamed, so concurrent writers (the fork pool, two shells) never leave half a file (the
folder and the writing: profiler/measure/cache_folder.py, shared with the calibration
cache). The report's capacity cache in a run folder (reports/render_cache.py) keys its
entries with this module's ``versions()`` too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Optional

from attnprof.profiler.measure import trust
from attnprof.profiler.measure.cache_folder import ENV, cache_dir, trusted, write_atomically
from attnprof.profiler.records import Point
from attnprof.profiler.units import printable

SCHEMA = 2  # bump when the entry's layout or meaning changes
FIELDS = ("peak_bytes", "breakdown_bytes", "largest_at_peak", "flops_fwd", "flops_bwd", "method", "op_costs",
          "peak_op", "peak_pass")  # issue 24: peak split
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the attnprof package (the repository root)
_NOT_SOURCE = {"tests", "scripts", "docs", "runs", "build", "dist"}

_enabled = True
_warned = False
_source_digest: Optional[str] = None


@contextlib.contextmanager
def disabled():
    """Inside: predictions neither read nor write the cache (``--no-cache``)."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


def is_enabled() -> bool:
    return _enabled


def check_folder() -> bool:
    """Whether the cache folder may be used (trust.py), warning once if not. Called by a
    command before it starts workers, so the warning is printed once, not by each."""
    return not _enabled or trusted(cache_dir() / "predictions")


# --- the key ------------------------------------------------------------------------------
def source_digest() -> str:
    """sha256 over attnprof's own source files (path and content), computed once."""
    global _source_digest
    if _source_digest is None:
        files = []
        for folder, dirs, names in os.walk(_PACKAGE_ROOT):
            top = folder == str(_PACKAGE_ROOT)
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and not (top and d in _NOT_SOURCE))
            files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
        digest = hashlib.sha256()
        for path in sorted(files):
            digest.update(os.path.relpath(path, _PACKAGE_ROOT).encode() + b"\0")
            with open(path, "rb") as source:
                digest.update(source.read() + b"\0")
        _source_digest = digest.hexdigest()
    return _source_digest


def _plugin_digest(cls) -> Optional[str]:
    """sha256 of the file a plug-in variant's class comes from; None if it cannot be read."""
    try:
        path = inspect.getsourcefile(cls)
        if path is None:
            spec = importlib.util.find_spec(cls.__module__)
            path = spec.origin if spec else None
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    except (OSError, TypeError, ValueError, ImportError):
        return None


def key_of(point: Point) -> Optional[dict]:
    """The cache key of a point's prediction, or None when it must not be cached."""
    from attnprof.scenarios.variants.registry import spec_of

    spec = spec_of(point)
    cls = spec.cls
    options = cls.resolve_options(spec.options)
    builtin = cls.__module__.startswith("attnprof.scenarios.variants.")
    plugin = None if builtin else _plugin_digest(cls)
    if not builtin and plugin is None:
        return None
    return {**versions(), "point": list(point.key()), "options": {k: _plain(v) for k, v in sorted(options.items())},
            "plugin": plugin, "kernels": point.kernels}  # issue 39: the same point traced as CUDA runs it differs


def versions() -> dict:
    """What every cached prediction depends on beside its point: the entry schema, torch's
    and attnprof's versions and the source digest. The report's caches in a run folder
    (reports/render_cache.py) are keyed by it too (``versions_tag``)."""
    from attnprof import __version__

    return {"schema": SCHEMA, "torch": torch_version(), "attnprof": __version__, "source": source_digest()}


def versions_tag() -> str:
    """``versions()`` in 16 hex digits: a cache entry made under other versions is stale."""
    return hashlib.sha256(_canonical(versions()).encode()).hexdigest()[:16]


def torch_version() -> str:
    """torch's version, without importing torch where it is not imported yet (a report
    that reads its caches need not pay for it)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.__version__
    from importlib.metadata import version

    return version("torch")


def _plain(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else repr(value)


def _canonical(data) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _path_of(key: dict) -> Path:
    return cache_dir() / "predictions" / (hashlib.sha256(_canonical(key).encode()).hexdigest() + ".json")


def checksum(key: dict, value: dict) -> str:
    return hashlib.sha256(_canonical([key, value]).encode()).hexdigest()


# --- reading and writing ------------------------------------------------------------------
def load(point: Point) -> Optional[dict]:
    """The cached figures of a point (a dict of FIELDS), or None: no entry, caching off, or
    an entry that is not trustworthy. An entry of the user's own that cannot be read back
    (damaged, edited, of the wrong shape) is moved aside, never overwritten (``_set_aside``)."""
    if not _enabled:
        return None
    try:
        key = key_of(point)
        if key is None:
            return None
        path = _path_of(key)
        if not trusted(path.parent):
            return None
    except Exception:  # noqa: BLE001 - a plug-in whose class cannot be resolved, an unreadable source: no cache
        return None
    try:
        read = trust.read_entry_with_id(path)
    except OSError:  # none there, or unreadable now (EIO, EMFILE): a miss; the entry is left as it is
        return None
    if read is None:  # not this user's own file (or a link): never trusted, never moved
        return None
    raw, identity = read
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return _set_aside(path, identity, "not valid JSON in UTF-8")
    if not (isinstance(data, dict) and set(data) == {"key", "value", "checksum"} and data["key"] == key):
        return _set_aside(path, identity, "not an entry for this point")
    value = data["value"]
    if not _valid(value) or data["checksum"] != checksum(key, value):
        return _set_aside(path, identity, "its figures do not match its checksum or their types")
    return value


def _set_aside(path: Path, identity: tuple, why: str) -> None:
    """An entry that cannot be used: renamed beside itself (safeio.move_aside), so the fresh
    prediction written next never destroys what could not be read; one warning line per
    process. Where it cannot be moved it stays, and this point is not cached (``_kept``)."""
    from attnprof.profiler.safeio import Replaced, move_aside

    try:
        moved = move_aside(path, identity)
    except (FileNotFoundError, Replaced):  # another process moved it first (and may have written a fresh one)
        return None
    except OSError as exc:
        _kept.add(path)
        _warn_once(f"warning: the prediction cache entry {path} cannot be read ({why}) nor moved aside "
                   f"({exc.strerror or exc}); it is left as it is, and this prediction is not cached")
        return None
    _warn_once(f"warning: the prediction cache entry {path} cannot be read ({why}); kept as {moved.name}, "
               f"and the prediction is made again")
    return None


_kept: set = set()  # entries that could be neither read nor moved aside: never overwritten


def _valid(value) -> bool:
    from attnprof.profiler.measure.tracker import BASE_CATEGORIES, CATEGORIES

    def count(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    if not (isinstance(value, dict) and set(value) == set(FIELDS)):
        return False
    breakdown, largest = value["breakdown_bytes"], value["largest_at_peak"]
    return (count(value["peak_bytes"]) and count(value["flops_fwd"]) and count(value["flops_bwd"])
            and isinstance(value["method"], str)
            and isinstance(breakdown, dict) and set(BASE_CATEGORIES) <= set(breakdown) <= set(CATEGORIES)
            and all(count(v) for v in breakdown.values())
            and isinstance(largest, list)
            and all(isinstance(t, dict) and set(t) == {"op", "shape", "dtype", "category", "bytes"}
                    and count(t["bytes"]) and isinstance(t["shape"], list) for t in largest)
            and isinstance(value["op_costs"], list)
            and all(isinstance(r, list) and len(r) == 6 and r[0] in ("fwd", "bwd")
                    and (r[1] is None or isinstance(r[1], str)) and all(count(x) for x in r[2:])
                    for r in value["op_costs"]))


def store(point: Point, value: dict) -> None:
    """Write a point's figures (a dict of FIELDS); a folder that cannot be written is a
    one-line warning (once per process), never an error."""
    if not _enabled:
        return
    try:
        key = key_of(point)
    except Exception:  # noqa: BLE001 - see load
        return
    if key is None:
        return
    path = _path_of(key)
    if path in _kept or not trusted(path.parent):
        return
    try:
        write_atomically(path, json.dumps({"key": key, "value": value, "checksum": checksum(key, value)}))
    except OSError as exc:
        _warn_once(f"warning: cannot write the prediction cache in {path.parent} "
                   f"({exc.strerror or exc}); predictions are not cached (set {ENV} to another folder)")


def reset_warnings() -> None:
    """Forget that the one warning was printed: the next unwritable folder says so again."""
    global _warned
    _warned = False


def _warn_once(line: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(printable(" ".join(line.split())), file=sys.stderr)
