"""This machine's calibration, cached: measured once per host, CPU, torch version and
thread count, then read back in milliseconds.

One JSON file per key under the prediction cache's folder (profiler/measure/cache.py
``cache_dir()``): ``calibration/<host>-<threads>t-<sha256 of the key, 16 hex>.json``. An
entry is used only when it is one: valid JSON, the same key, every field present and
plausible (``calibrate.problems``). Anything else is ignored and measured again, and the
new figures overwrite it. A cache folder that cannot be written costs a warning, never
the calibration.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Optional

from attnprof.profiler.measure.cache import cache_dir, write_atomically
from attnprof.profiler.timemodel.calibrate import (Calibration, CalibrationError, cache_key, check, describe_machine,
                                                   problems)

FOLDER = "calibration"


def path_of(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(key.get("host", "host")))[:40]
    return cache_dir() / FOLDER / f"{host}-{key.get('threads')}t-{digest}.json"


def load(key: dict) -> Optional[Calibration]:
    """The cached calibration for ``key``, or None (none, foreign, corrupt or implausible)."""
    try:
        data = json.loads(path_of(key).read_text(encoding="utf-8"))
        cal = Calibration.from_dict(data.get("calibration"))
    except (OSError, ValueError, UnicodeDecodeError, TypeError, AttributeError, CalibrationError):
        return None
    if data.get("key") != key or cal.key() != key or problems(cal):
        return None
    return cal


def save(cal: Calibration) -> Optional[Path]:
    """Write ``cal`` atomically; None (and a warning on stderr) when the folder cannot be written."""
    path = path_of(cal.key())
    try:
        write_atomically(path, json.dumps({"key": cal.key(), "calibration": cal.to_dict()}, indent=1))
    except OSError as exc:
        print(f"attnprof: warning: cannot write the calibration cache in {path.parent} ({exc.strerror or exc}); "
              f"this machine will be measured again next time", file=sys.stderr)
        return None
    return path


def calibration(threads: Optional[int] = None, *, use_cache: bool = True,
                measure_fn: Optional[Callable[..., Calibration]] = None) -> tuple[Calibration, bool]:
    """(this machine's calibration at ``threads`` torch threads, whether it came from the
    cache). Measures (and caches) when there is no usable entry or ``use_cache`` is False;
    CalibrationError when the measurement fails or is implausible (nothing is cached then)."""
    key = cache_key(*describe_machine(threads))
    if use_cache:
        cached = load(key)
        if cached is not None:
            return cached, True
    from attnprof.profiler.timemodel import calibrate

    cal = check((measure_fn or calibrate.measure)(threads=key["threads"]))
    save(cal)
    return cal, False


def machine_rates(threads: Optional[int] = None, warn: Callable[[str], None] = lambda line: None,
                  announce: Callable[[str], None] = lambda line: None, measure: bool = True):
    """This CPU's ``Rates`` (calibrated on first use, which ``announce`` is told), or None
    after one ``warn`` line when the calibration fails: then no time is predicted.
    ``measure=False``: only a calibration already cached; None (silently) if there is none."""
    from attnprof.profiler.timemodel.rates import cpu_rates

    if not measure and load(cache_key(*describe_machine(threads))) is None:
        return None
    try:
        cal, cached = calibration(threads)
    except CalibrationError as exc:
        warn(f"warning: {exc}")
        return None
    if not cached:
        announce(f"calibrated this machine for time predictions in {cal.wall_s:.1f} s (cached for next time)")
    return cpu_rates(cal)
