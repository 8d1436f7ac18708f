"""The flat table of ``attnprof export``: CSV and JSON give back every record's figures, one
scalar per cell, formulas neutralised; Parquet through pyarrow (when installed)."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest
from conftest import ci_records, synthetic_record

from attnprof.profiler.runner.schema import check_record
from attnprof.reports import export_table
from attnprof.reports.benchmark_action import point_name

FIGURES = ("predicted_peak_bytes", "measured_peak_bytes", "time_fwd_ms", "time_bwd_ms", "seq_len", "status")


def records(**kw) -> list[dict]:
    """Records as the validated reader gives them: every PointRecord field."""
    out = []
    for r in ci_records(variants=("sdpa", "full"), modes=("plain", "checkpoint"), **kw):
        record, problem = check_record(json.loads(json.dumps(r.to_row())))
        assert problem is None
        out.append(record)
    out[0]["predicted_breakdown_bytes"] = {"activations": 1000, "parameters": 24}
    out[1]["time_fwd_samples_ms"] = [0.5, 0.25]
    return out


def test_csv_round_trips_every_figure():
    recs = records()
    rows = list(csv.DictReader(io.StringIO(export_table.to_csv(recs).decode("utf-8"))))
    assert len(rows) == len(recs)
    for row, rec in zip(rows, recs):
        assert row["point"] == point_name(rec)
        for f in FIGURES:
            want = rec[f]
            got = row[f]
            assert (got == "" if want is None else type(want)(got) == want), (f, got, want)
    assert rows[0]["predicted_breakdown_bytes.activations"] == "1000"
    assert rows[1]["predicted_breakdown_bytes.activations"] == ""
    assert json.loads(rows[1]["time_fwd_samples_ms"]) == [0.5, 0.25]
    assert float(rows[0]["time_ms"]) == pytest.approx(recs[0]["time_fwd_ms"] + recs[0]["time_bwd_ms"])


def test_json_round_trips_every_figure():
    recs = records()
    rows = json.loads(export_table.to_json(recs))
    assert [r["point"] for r in rows] == [point_name(r) for r in recs]
    for row, rec in zip(rows, recs):
        assert {f: row[f] for f in FIGURES} == {f: rec[f] for f in FIGURES}
    assert rows[0]["predicted_breakdown_bytes.parameters"] == 24
    assert rows[1]["time_fwd_samples_ms"] == [0.5, 0.25]
    assert all(set(r) == set(rows[0]) for r in rows)  # a table: the same columns in every row
    assert not any(isinstance(v, dict) for r in rows for v in r.values())


def test_columns_follow_the_record_and_keep_units():
    cols = export_table.columns(records())
    assert cols[:3] == ["point", "variant", "mode"]
    assert cols.index("time_ms") == cols.index("time_bwd_ms") + 1
    assert "predicted_breakdown_bytes" not in cols and "predicted_breakdown_bytes.activations" in cols


def test_a_formula_in_a_label_is_not_run_by_a_spreadsheet():
    rec = records()[0]
    rec["variant"] = "=HYPERLINK(\"http://x\",\"y\")"
    rec["reason"] = "-1+2"
    row = next(csv.DictReader(io.StringIO(export_table.to_csv([rec]).decode("utf-8"))))
    assert row["variant"] == "'" + rec["variant"] and row["reason"] == "'-1+2"


def test_json_escapes_control_characters():
    rec = records()[0]
    rec["variant"] = "evil\x1b[2J\u202e"
    data = export_table.to_json([rec])
    assert data.isascii() and b"\x1b" not in data
    assert json.loads(data)[0]["variant"] == rec["variant"]


def test_csv_spells_out_control_characters_and_lone_surrogates():
    """A CR broke rows (the csv module quotes only the line terminator's \\n), ESC and BEL reached
    the terminal raw, and a lone surrogate could not be encoded (a traceback)."""
    recs = records()[:2]
    recs[0]["variant"] = "sdpa\r\x1b[2J\x07"
    recs[0]["reason"] = "broken \ud800 text"
    data = export_table.to_csv(recs)
    assert not any(ch in data for ch in (b"\r", b"\x1b", b"\x07"))
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    assert len(rows) == 2 and rows[0]["variant"] == "sdpa\\r\\x1b[2J\\x07"
    assert rows[0]["reason"] == "broken \\ud800 text"
    recs[1]["variant"] = "caf\u00e9 a\u00a0b \U0001f469\u200d\U0001f52c \u202eevil"  # legitimate text kept, bidi spelled out
    row = list(csv.DictReader(io.StringIO(export_table.to_csv(recs).decode("utf-8"))))[1]
    assert row["variant"] == "caf\u00e9 a\u00a0b \U0001f469\u200d\U0001f52c \\u202eevil"
    recs[1]["reason"] = "a\u2028b\u2029c"  # line and paragraph separators: a row split in two by splitlines
    data = export_table.to_csv(recs)
    assert "\u2028".encode() not in data and "\u2029".encode() not in data
    assert len(data.decode("utf-8").splitlines()) == 3
    assert list(csv.DictReader(io.StringIO(data.decode("utf-8"))))[1]["reason"] == "a\\u2028b\\u2029c"


def test_non_finite_is_named():
    rec = records()[0]
    assert export_table.non_finite(rec) is None
    rec["time_bwd_samples_ms"] = [1.0, float("nan")]
    assert export_table.non_finite(rec) == "time_bwd_samples_ms"


def test_missing_pyarrow_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(export_table.ExportError) as err:
        export_table.to_parquet(records())
    assert "pyarrow" in str(err.value) and "attnprof[parquet]" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_parquet_round_trips_when_pyarrow_is_installed():
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    recs = records()
    table = pq.read_table(pyarrow.BufferReader(export_table.to_parquet(recs))).to_pylist()
    assert [r["measured_peak_bytes"] for r in table] == [r["measured_peak_bytes"] for r in recs]
    assert [r["time_fwd_ms"] for r in table] == [r["time_fwd_ms"] for r in recs]
    assert json.loads(table[1]["time_fwd_samples_ms"]) == [0.5, 0.25]


def test_parquet_types_come_from_the_record_not_the_values():
    pyarrow = pytest.importorskip("pyarrow")
    recs = records()
    recs[0]["variant"] = "123"
    cols, rows = export_table.table(recs)
    schema = export_table.parquet_schema(pyarrow, cols, rows)
    assert schema.field("variant").type == pyarrow.string()
    assert schema.field("measured_peak_bytes").type == pyarrow.int64()


def test_synthetic_records_differ_by_point():
    a, b = (synthetic_record("sdpa", "plain", n).to_row() for n in (256, 512))
    assert point_name(a) != point_name(b)


def test_parquet_hands_pyarrow_the_declared_schema_and_scalar_rows(monkeypatch):
    """Without pyarrow here: a stand-in that records what ``to_parquet`` gives it (the real
    round trip is the importorskip test above, run where pyarrow is installed)."""
    import types

    seen = {}
    pa = types.ModuleType("pyarrow")
    for name in ("int64", "float64", "bool_", "string"):
        setattr(pa, name, lambda _n=name: _n)
    pa.field = lambda name, kind: (name, kind)
    pa.schema = lambda fields: list(fields)

    class Table:
        @staticmethod
        def from_pylist(rows, schema):
            seen["rows"], seen["schema"] = rows, schema
            return "table"

    class Sink:
        def getvalue(self):
            return types.SimpleNamespace(to_pybytes=lambda: b"PAR1")

    pa.Table, pa.BufferOutputStream = Table, Sink
    pq = types.ModuleType("pyarrow.parquet")
    pq.write_table = lambda table, sink: seen.setdefault("written", table)
    pa.parquet = pq
    monkeypatch.setitem(sys.modules, "pyarrow", pa)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", pq)
    assert export_table.to_parquet(records()) == b"PAR1" and seen["written"] == "table"
    schema = dict(seen["schema"])
    assert schema["measured_peak_bytes"] == "int64" and schema["time_fwd_ms"] == "float64"
    assert schema["forward_only"] == "bool_" and schema["variant"] == "string" and schema["time_ms"] == "float64"
    assert schema["time_fwd_samples_ms"] == "string" and schema["predicted_breakdown_bytes.activations"] == "int64"
    assert json.loads(seen["rows"][1]["time_fwd_samples_ms"]) == [0.5, 0.25]
    assert not any(isinstance(v, (list, dict)) for row in seen["rows"] for v in row.values())
