"""The fast path's trust verdict (profiler/measure/internals.py), remembered across processes.

Every process that predicts through fake tensors first checks that torch's private
internals behave as the quick fake mode assumes: two tiny traces, one through torch's own
slow paths (measured: ~0.7 s of a cold prediction's first point, imports aside). The check
is deterministic for a given torch build and attnprof source, so a passed one is kept in
the cache folder, ``verdicts/<sha256 of the key>.json``, and the next process recalls it.

The key holds what the verdict depends on: the prediction cache's ``versions()`` (schema,
torch's and attnprof's versions, the digest of attnprof's source), torch's git commit, a
digest of the torch files whose internals the fast path leans on (TORCH_FILES), and whether
the check ran a backward (on a CUDA build in a process that may fork it checks forward ops
only: internals.tiny_trace). Only a pass is kept; a failed check runs, and says so, in every
process.

The folder is untrusted data, as the prediction cache's (cache.py, trust.py): read only
when it is the user's own, never through a link, an entry trusted only when it is exactly
``{"key": <the key>, "trusted": true}``. Anything else at that path is left alone, never
overwritten: the check then runs in every process (slower, never wrong). ``--no-cache``
(``cache.disabled``) neither reads nor writes a verdict.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from attnprof.profiler.measure import internals, trust
from attnprof.profiler.measure.cache_folder import cache_dir, trusted, write_atomically
from attnprof.profiler.predict import cache

SCHEMA = 1  # bump when the key or the entry changes meaning
FOLDER = "verdicts"
# torch's files (under its package) holding the internals internals.check exercises
TORCH_FILES = ("_subclasses/fake_tensor.py", "_subclasses/fake_impls.py", "_dynamo/config.py")

_torch_files: dict = {}  # torch's package folder -> the digest of its TORCH_FILES


def install() -> None:
    """Let ``internals.trusted`` recall and remember through this module (idempotent)."""
    internals.remember_with(recall, remember)


def key() -> dict:
    """What a kept verdict depends on (see the module docstring)."""
    import torch

    from attnprof.profiler.forks import autograd_fork_safe, cuda_compiled

    return {**cache.versions(), "verdict": SCHEMA, "torch_git": str(getattr(torch.version, "git_version", "")),
            "torch_files": torch_files_digest(Path(torch.__file__).parent),
            "backward": not (cuda_compiled() and autograd_fork_safe())}


def torch_files_digest(root: Path) -> str:
    """sha256 over TORCH_FILES under torch's package folder ``root`` (computed once per folder)."""
    found = _torch_files.get(root)
    if found is None:
        digest = hashlib.sha256()
        for name in TORCH_FILES:
            digest.update(name.encode() + b"\0")
            try:
                digest.update((root / name).read_bytes() + b"\0")
            except OSError:
                digest.update(b"missing\0")
        found = _torch_files[root] = digest.hexdigest()
    return found


def path_of(verdict_key: dict) -> Path:
    name = hashlib.sha256(json.dumps(verdict_key, sort_keys=True).encode()).hexdigest()
    return cache_dir() / FOLDER / f"{name}.json"


def recall() -> bool:
    """Whether this torch build and source passed the check before (an entry of our own)."""
    if not cache.is_enabled():
        return False
    k = key()
    path = path_of(k)
    if not trusted(path.parent):
        return False
    try:
        text = trust.read_entry(path)
        data = json.loads(text) if text is not None else None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return data == {"key": k, "trusted": True}


def remember() -> None:
    """Keep a passed check; nothing where an entry (even an unreadable one) already is."""
    if not cache.is_enabled():
        return
    k = key()
    path = path_of(k)
    if not trusted(path.parent) or os.path.lexists(path):
        return
    with contextlib.suppress(OSError):  # an unwritable folder: the prediction cache says so
        write_atomically(path, json.dumps({"key": k, "trusted": True}))
