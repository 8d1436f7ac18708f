"""Point.spec (profiler/records.py): the parsed variant a point carries, set by whoever
builds the point; not identity, never written into a record, kept through pickling and
dataclasses.replace. The data model imports nothing of scenarios."""

from __future__ import annotations

import ast
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from attnprof.profiler import records
from attnprof.profiler.records import IDENTITY_FIELDS, NOT_IDENTITY, Point, PointRecord, Shape
from attnprof.scenarios.variants.registry import parse_variant, spec_of, with_spec

SHAPE = Shape(seq_len=128, d_model=32, heads=2, layers=1)


def test_the_spec_is_not_identity_nor_repr_nor_record():
    spec = parse_variant("lsh[n_hashes=2]")
    carried, bare = Point(spec.label, "plain", "model", SHAPE, spec=spec), Point(spec.label, "plain", "model", SHAPE)
    assert carried == bare and hash(carried) == hash(bare) and carried.key() == bare.key()
    assert "spec" in NOT_IDENTITY and "spec" not in IDENTITY_FIELDS
    assert "spec" not in repr(carried) and "VariantSpec" not in repr(carried)
    assert "spec" not in PointRecord.for_point(carried).to_row()


def test_a_spec_of_another_label_is_refused():
    with pytest.raises(ValueError):
        Point("full", "plain", "model", SHAPE, spec=parse_variant("lsh"))


def test_the_spec_survives_pickling_and_replace():
    spec = parse_variant("sparse_strided[combine=interleaved]")
    point = Point(spec.label, "plain", "model", SHAPE, spec=spec)
    assert point.spec.cls.name == "sparse_strided"  # looked up, then kept on the spec
    again = pickle.loads(pickle.dumps(point))
    assert again.spec == spec and again.spec.cls is spec.cls
    longer = replace(point, shape=SHAPE.with_len(256))
    assert longer.spec is spec


def test_a_hand_built_point_is_parsed_where_it_is_used():
    bare = Point("lsh[n_hashes=2]", "plain", "model", SHAPE)
    assert bare.spec is None
    assert spec_of(bare) == parse_variant("lsh[n_hashes=2]")
    carried = with_spec(bare)
    assert carried.spec == spec_of(bare) and with_spec(carried) is carried and spec_of(carried) is carried.spec


def test_records_imports_nothing_of_scenarios():
    tree = ast.parse(Path(records.__file__).read_text(encoding="utf-8"))
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if "scenarios" in m]
