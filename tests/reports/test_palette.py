"""Colour families: configurations of a variant share a hue."""

from attnprof.reports.palette import colours, markers


def test_configurations_of_a_variant_share_a_hue_and_differ_in_shade():
    series = ["full", "lsh", "lsh[n_hashes=2]", "lsh[n_hashes=8]", "sdpa"]
    col = colours(series)
    lsh = [col[s] for s in series[1:4]]
    assert len(set(lsh)) == 3  # three shades
    # same hue family: the orange map keeps red > green > blue in every shade
    assert all(r > g > b for r, g, b, _ in lsh)
    assert col["full"] not in lsh and col["sdpa"] not in lsh
    mark = markers(series)
    assert len({mark[s] for s in series[1:4]}) == 3 and mark["full"] == mark["lsh"]


def test_a_plugin_label_is_its_own_family_without_being_resolved():
    col = colours(["pkg.mod:Mine", "pkg.mod:Mine[causal=false]", "sdpa"])
    assert col["pkg.mod:Mine"] != col["pkg.mod:Mine[causal=false]"]  # two shades of one family
