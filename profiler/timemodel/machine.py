"""This machine's calibration, cached: measured once per host, CPU, torch version and
thread count, then read back in milliseconds.

One JSON file per key under the prediction cache's folder (profiler/measure/cache_folder.py
``cache_dir()``): ``calibration/<host>-<threads>t-<sha256 of the key, 16 hex>.json``. An
entry is used only when it is one: valid JSON, the same key, every field present and
plausible (``calibrate.problems``, field by field: a list or a string where a table of
rates goes, null, negative, NaN). Anything else is ignored with one warning line, moved
aside (``NAME.unreadable-...`` beside it: never overwritten) and measured again; a plain ``predict`` (which never
measures) then predicts no time rather than one made from it. A cache folder that
cannot be written costs a warning, never the calibration; one that is not the user's own
(``trust``) is neither read nor written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler.measure import trust
from attnprof.profiler.units import printable
from attnprof.profiler.measure.cache_folder import cache_dir, trusted, write_atomically
from attnprof.profiler.timemodel.calibrate import (Calibration, CalibrationError, cache_key, check, describe_machine,
                                                   problems)

FOLDER = "calibration"


def cache_unusable() -> bool:
    """Whether no calibration can be cached (the folder, or the cache folder above it, is no
    folder or not the user's own); judged without a warning (``trusted`` says it once)."""
    return any(any(trust.judge(cache_dir(), p)) for p in (cache_dir(), cache_dir() / FOLDER))


def path_of(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(key.get("host", "host")))[:40]
    return cache_dir() / FOLDER / f"{host}-{key.get('threads')}t-{digest}.json"


Warn = Callable[[str], None]


def load(key: dict, warn: Optional[Warn] = None, then: str = "") -> Optional[Calibration]:
    """The cached calibration for ``key``, or None: none cached, the cache folder not the
    user's own (``trust``), or an entry that is foreign, corrupt or implausible. Such an
    entry costs one ``warn`` line (why, and ``then``: what happens next), never a traceback
    and never a figure made from it."""
    path = path_of(key)
    if not trusted(path.parent, warn=warn):
        return None
    try:
        text = trust.read_entry(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:  # unreadable now (EIO, EMFILE): left as it is; not text: aside
        return _ignored(path, getattr(exc, "strerror", None) or str(exc), warn, then,
                        aside=isinstance(exc, UnicodeDecodeError))
    if text is None:
        return _ignored(path, "it is not a file of yours alone", warn, then, aside=False)
    try:
        data = json.loads(text)
        cal = Calibration.from_dict(data.get("calibration") if isinstance(data, dict) else None)
    except (ValueError, RecursionError, TypeError):  # CalibrationError is a ValueError
        return _ignored(path, "not a calibration record", warn, then)
    if data.get("key") != key or not _same_key(cal, key):
        return _ignored(path, "its key is not this machine's", warn, then)
    found = problems(cal)
    if found:
        return _ignored(path, found[0], warn, then)
    return cal


def _same_key(cal: Calibration, key: dict) -> bool:
    try:
        return cal.key() == key
    except TypeError:  # an unhashable field where the key has text
        return False


def _ignored(path: Path, why: str, warn: Optional[Warn], then: str, aside: bool = True) -> None:
    """One warning line; the entry (of the user's own: ``aside``) renamed beside itself first
    (safeio.move_aside), so the calibration saved next never destroys what could not be read."""
    kept = ""
    if aside:
        from attnprof.profiler.safeio import move_aside

        try:
            kept = f"; kept as {move_aside(path).name}"
        except OSError:
            kept = ""
    if warn is not None:
        warn(printable(" ".join(f"warning: the cached calibration {path} is unusable ({why}){kept}; "
                                f"ignored{then}".split())))
    return None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def save(cal: Calibration, warn: Optional[Warn] = None) -> Optional[Path]:
    """Write ``cal`` atomically; None (and one ``warn`` line, else stderr) when the folder
    cannot be written, or is not the user's own or no folder (``trust``: then nothing is
    written there, and the line was said when it was judged)."""
    path = path_of(cal.key())
    if not trusted(path.parent, warn=warn or _stderr):
        return None
    try:
        write_atomically(path, json.dumps({"key": cal.key(), "calibration": cal.to_dict()}, indent=1))
    except OSError as exc:
        (warn or _stderr)(f"warning: cannot write the calibration cache in {path.parent} ({exc.strerror or exc}); "
                          f"this machine will be measured again next time")
        return None
    return path


def stored_at(cal: Calibration) -> Optional[Path]:
    """Where ``cal`` is cached: its file when that holds these very figures (read back, of
    the user's own), else None, so that nothing names a file that was not written."""
    path = path_of(cal.key())
    return path if load(cal.key()) == cal else None


def calibration(threads: Optional[int] = None, *, use_cache: bool = True,
                measure_fn: Optional[Callable[..., Calibration]] = None,
                warn: Optional[Warn] = None) -> tuple[Calibration, bool]:
    """(this machine's calibration at ``threads`` torch threads, whether it came from the
    cache). Measures (and caches, over an unusable entry) when there is no usable entry or
    ``use_cache`` is False; CalibrationError when the measurement fails or is implausible
    (nothing is cached then). ``warn``: the one line about an unusable entry."""
    key = cache_key(*describe_machine(threads))
    if use_cache:
        cached = load(key, warn, then=", measuring this machine again")
        if cached is not None:
            return cached, True
    from attnprof.profiler.timemodel import calibrate

    cal = check((measure_fn or calibrate.measure)(threads=key["threads"]))
    save(cal, warn)
    return cal, False


def machine_rates(threads: Optional[int] = None, warn: Warn = lambda line: None,
                  announce: Warn = lambda line: None, measure: bool = True):
    """This CPU's ``Rates`` (calibrated on first use, which ``announce`` is told), or None
    after one ``warn`` line when the calibration fails: then no time is predicted.
    ``measure=False``: only a calibration already cached; None if there is none (an
    unusable entry says so in one ``warn`` line)."""
    from attnprof.profiler.timemodel.rates import cpu_rates

    if not measure:
        cal = load(cache_key(*describe_machine(threads)), warn,
                   then="; no step times until `attnprof calibrate` measures this machine again")
        return None if cal is None else cpu_rates(cal)
    try:
        cal, cached = calibration(threads, warn=warn)
    except CalibrationError as exc:
        warn(f"warning: {exc}")
        return None
    if not cached:
        announce(f"calibrated this machine for time predictions in {cal.wall_s:.1f} s (cached for next time)")
    return cpu_rates(cal)
