"""How numbers read and print: one formatter per kind, the same text everywhere."""

import pandas as pd
import pytest

from attnprof.profiler import units
from attnprof.profiler.units import (GIB, fmt_bytes, fmt_flops, fmt_len, fmt_ms, fmt_pct, missing, mpl_text,
                                     parse_bytes, parse_percent)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (4 << 20, "4.00 MiB"),
                                     (int(32.05 * GIB), "32.05 GiB"), (141 * GIB, "141.00 GiB"),
                                     (3 << 40, "3.00 TiB"), (-(2 << 20), "-2.00 MiB"), (1048576.0, "1.00 MiB")])
def test_bytes_print_one_way(n, text):
    assert fmt_bytes(n) == text


@pytest.mark.parametrize("value", [None, float("nan"), pd.NA, pd.NaT])
def test_missing_values_print_as_the_chosen_blank(value):
    assert missing(value)
    assert fmt_bytes(value) == "-" and fmt_bytes(value, blank="") == ""
    assert fmt_ms(value) == fmt_len(value) == fmt_pct(value) == fmt_flops(value) == "-"
    assert fmt_ms(value, blank="?") == "?"


def test_a_number_prints_the_same_whoever_asks():
    """The report, the gate and the CLI all print through profiler.units: no second formatter."""
    from attnprof.profiler.gate import format as gate_format
    from attnprof.reports import charts, diff, tables

    for module in (gate_format, charts, diff, tables):
        assert getattr(module, "fmt_bytes", units.fmt_bytes) is units.fmt_bytes
        assert not hasattr(module, "format_bytes")
    with pytest.raises(ImportError):
        import attnprof.reports.units  # noqa: F401  (gone: profiler.units is the one home)


def test_lengths_times_and_percentages():
    assert [fmt_len(n) for n in (256, 1024, 65536, 1 << 20, 1000)] == ["256", "1K", "64K", "1M", "1000"]
    assert fmt_ms(12.345) == "12.3 ms" and fmt_ms(2500) == "2.5 s"
    assert fmt_pct(11.11) == "+11.1%" and fmt_pct(-2.96) == "-3.0%"
    assert fmt_flops(2.5e12) == "2.50 TFLOP"
    assert mpl_text("a$b$") == r"a\$b\$"


def test_parse_sizes_and_percentages():
    assert parse_bytes("80GiB") == 80 * GIB and parse_bytes("1.5 GB") == 1_500_000_000 and parse_bytes(4096) == 4096
    assert parse_bytes("0", allow_zero=True) == 0
    assert parse_percent("2%") == parse_percent(" 2 ") == 2.0
    for bad in ("-1%", "nan", "NaN%", "inf", "-inf%", "1e999", "two"):
        with pytest.raises(ValueError):
            parse_percent(bad)
    for bad in ("-1", "1 parsec", "inf", "nan", "0"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_text_table_pads_columns_and_spells_out_control_characters():
    from attnprof.profiler.units import text_table

    assert text_table(["a", "bb"], [["xxx", "y"], ["z\n", "w"]]) == ["a    bb", "xxx  y", "z\\n  w"]


def test_every_unit_printed_is_read_back_over_the_whole_range():
    """Issue 40: one table of units serves printing and parsing; PiB (printed) was refused."""
    from attnprof.profiler.units import BYTE_UNITS, INT64_MAX

    for name, size in BYTE_UNITS:
        assert parse_bytes(f"1{name}") == parse_bytes(f"1 {name.upper()}") == size
    for n in [0, 1, 512, 1023, 1024, 1536, 10**6, 3 << 30, 5 << 40, 1 << 50, 7 << 52, 10**18, INT64_MAX]:
        text = fmt_bytes(n)
        size = next(s for name, s in BYTE_UNITS if text.endswith(" " + name))
        back = parse_bytes(text, allow_zero=True)
        assert abs(back - n) <= 0.005 * size and back <= INT64_MAX, (n, text, back)  # two decimals printed
    assert parse_bytes("1PiB") == 1 << 50 and parse_bytes("2 PB") == 2 * 10**15 and parse_bytes("1p") == 1 << 50
    for bad in ("8193PiB", "1EiB", "1e3"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_the_size_flags_take_what_the_tables_print():
    from attnprof.api.overrides import to_bytes
    from attnprof.profiler.gate import parse_bytes as gate_bytes

    assert to_bytes("1PiB", "--budget") == 1 << 50 and gate_bytes("1.00 PiB") == 1 << 50


def test_short_number_quotes_a_figure_or_counts_the_bits_of_a_huge_one():
    from attnprof.profiler.units import short_number

    assert short_number(-5368709120) == "-5368709120" and short_number(1e308) == "1e+308"
    assert short_number(float("nan")) == "nan" and short_number(2**63) == str(2**63)
    assert short_number(10**400) == "an integer of 1329 bits"
    assert short_number(10**5000) == "an integer of 16610 bits"  # str() of it raises past 4300 digits
