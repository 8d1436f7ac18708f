"""The end-of-sweep summary table (profiler/runner/summary.py): one row per variant and
mode, the last record of a point winning, never wrapped off a terminal, a cell's time
under its memory on a narrow one."""

import io

from attnprof.profiler.runner.summary import grid, print_summary, summary_table, summary_text


class Terminal(io.StringIO):
    def isatty(self):
        return True


def record(n=1024, status="ok", variant="lsh[n_hashes=8]", mode="plain", **extra):
    base = dict(variant=variant, mode=mode, scope="model", seq_len=n, batch=1, d_model=64, heads=4, layers=1,
                dtype="float32", ff_mult=4, ff_chunks=1, forward_only=False, status=status, point_wall_s=1.25,
                measured_peak_bytes=3 << 20, time_fwd_ms=10.0, time_bwd_ms=22.0, reason="")
    return {**base, **extra}


def test_the_summary_has_one_row_per_variant_and_mode_and_the_last_record_wins():
    records = [record(256), record(512), record(512, status="oom"), record(256, variant="sdpa", mode="checkpoint")]
    lengths, rows = grid(records)
    assert lengths == [256, 512]
    assert rows == [("lsh[n_hashes=8]", "plain", {256: "3.00 MiB 32 ms", 512: "oom"}),
                    ("sdpa", "checkpoint", {256: "3.00 MiB 32 ms"})]
    text = summary_text(records)
    assert "peak tensor memory and fwd+bwd time" in text and "oom" in text
    assert summary_table(records) == text


def test_the_rich_summary_is_never_wrapped_off_a_terminal():
    records = [record(n, variant=v, mode=m) for v in ("lsh[n_hashes=8]", "sparse_strided") for m in
               ("plain", "checkpoint", "reversible") for n in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)]
    out = io.StringIO()
    print_summary(records, file=out)
    lines = out.getvalue().splitlines()
    assert any("lsh[n_hashes=8]" in line for line in lines)  # a label's brackets are text, not markup
    assert sum("reversible" in line for line in lines) == 2  # one line per row
    assert "65536" in out.getvalue() and "\x1b" not in out.getvalue()
    empty = io.StringIO()
    print_summary([], file=empty)
    assert empty.getvalue() == "(no points)\n"


def test_on_a_narrow_terminal_a_cells_time_goes_under_its_memory(monkeypatch):
    class Narrow(Terminal):
        pass

    monkeypatch.setenv("COLUMNS", "60")
    records = [record(n, variant="sdpa") for n in (256, 512, 1024, 2048)]
    out = Narrow()
    print_summary(records, file=out)
    text = out.getvalue()
    assert "3.00 MiB" in text and "32 ms" in text
    assert not any("3.00 MiB 32 ms" in line for line in text.splitlines())


def test_the_phases_line_gives_each_phases_median_over_the_ok_points():
    from attnprof.profiler.runner.summary import phases_line

    rows = [{"status": "ok", "point_wall_s": w, "point_phases_s": {"start": s, "predict": 0.1, "memory_pass": m}}
            for w, s, m in [(1.0, 0.2, 0.5), (3.0, 0.4, 2.0), (2.0, 0.3, 1.0)]]
    rows.append({"status": "error", "point_wall_s": 99.0, "point_phases_s": {"start": 50.0}})
    line = phases_line(rows)
    assert line == ("per point, median of 3 ok: start 0.30 s, predict 0.10 s, memory pass 1.00 s "
                    "(point wall 2.00 s)"), line
    assert phases_line([{"status": "ok", "point_phases_s": {}}]) == ""
