"""Colours: one hue per variant family, one shade per configuration of it, so
``lsh``, ``lsh[n_hashes=2]`` and ``lsh[n_hashes=8]`` read as one family at a glance."""

from __future__ import annotations

from matplotlib import colormaps

from attnprof.profiler.records import variant_family

# A family of one gets the tab10 colour (designed to be told apart); a larger family gets
# shades of the sequential map of the same hue.
_FAMILY_MAPS = ("Blues", "Oranges", "Greens", "Reds", "Purples", "YlOrBr", "RdPu", "Greys", "YlGn", "GnBu")
# The part of each map that stays visible on white: lighter than 0.45 washes out.
_LIGHTEST, _DARKEST = 0.45, 0.85
_MARKERS = ("o", "s", "^", "D", "v", "P", "<", ">")


def colours(series: list[str]) -> dict[str, tuple]:
    """series label -> RGBA; series of a family get shades of its hue, darkest first."""
    families: dict[str, list[str]] = {}
    for s in series:
        families.setdefault(variant_family(s), []).append(s)
    out = {}
    for i, (fam, members) in enumerate(families.items()):
        k = len(members)
        if k == 1:
            out[members[0]] = colormaps["tab10"](i % 10)
            continue
        cmap = colormaps[_FAMILY_MAPS[i % len(_FAMILY_MAPS)]]
        for j, s in enumerate(members):
            out[s] = cmap(_DARKEST - j * (_DARKEST - _LIGHTEST) / (k - 1))
    return out


def markers(series: list[str]) -> dict[str, str]:
    """Configurations of one family get different markers, telling shades apart in print."""
    seen: dict[str, int] = {}
    out = {}
    for s in series:
        fam = variant_family(s)
        out[s] = _MARKERS[seen.get(fam, 0) % len(_MARKERS)]
        seen[fam] = seen.get(fam, 0) + 1
    return out
