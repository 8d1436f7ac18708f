"""How numbers read, and colour families."""

from attnprof.reports.palette import colours, markers
from attnprof.reports.units import fmt_bytes, fmt_len, fmt_ms, mpl_text


def test_formats():
    assert fmt_bytes(4 << 20) == "4 MiB" and fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(None) == ""
    assert fmt_bytes(float("nan")) == "" and fmt_bytes(141 * (1 << 30)) == "141 GiB"
    assert [fmt_len(n) for n in (256, 1024, 65536, 1 << 20, 1000)] == ["256", "1K", "64K", "1M", "1000"]
    assert fmt_ms(12.345) == "12.3 ms" and fmt_ms(2500) == "2.5 s"
    assert mpl_text("a$b$") == r"a\$b\$"


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
