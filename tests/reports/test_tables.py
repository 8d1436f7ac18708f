"""The report's HTML tables (reports.tables): one escaping place (``cell``), row headers,
text columns, the series x length pivot and the flattened manifest."""

import math

from attnprof.reports.data import load
from attnprof.reports.tables import cell, manifest_table, pivot, table

from conftest import MANIFEST, Page, ci_records, write_run

EVIL = "<script>alert(1)</script>"


def test_a_cell_escapes_its_value_class_and_title_and_leaves_missing_values_empty():
    html = cell(EVIL, cls='a"b', title="<t>")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'class="a&quot;b"' in html and 'title="&lt;t&gt;"' in html
    assert cell(None) == cell(math.nan) == "<td></td>"
    assert cell(3, tag="th") == "<th>3</th>"


def test_a_table_heads_each_row_with_its_first_column_and_aligns_text_columns_left():
    html = table(["name", "note", "n"], [["a", ("x", "pred"), 1], [EVIL, "y", (2, "off")]],
                 row_classes=["first", ""], cls="t", text_cols=(1,))
    assert html.startswith('<table class="t"><thead><tr><th class="text">name</th><th class="text">note</th><th>n</th>')
    assert '<tr class="first"><th class="text">a</th><td class="pred text">x</td><td>1</td></tr>' in html
    assert '<tr><th class="text">&lt;script&gt;alert(1)&lt;/script&gt;</th><td class="text">y</td>' \
           '<td class="off">2</td></tr>' in html
    assert "<script>" not in html


def test_the_pivot_has_a_row_per_series_a_column_per_length_and_marks_points_not_ok(tmp_path):
    frame = load(write_run(tmp_path / "run", ci_records(variants=("full", "sdpa")))).frame
    html = pivot(frame, "plain", "memory")
    page = Page(html)
    assert page.tags.count("tr") == 3  # the header and one row per series
    assert page.tags.count("th") == 4 + 2  # variant + 3 lengths, and the two row headers
    assert 'class="status-oom"' in html and "oom (pred. " in html  # full plain at 1024
    assert html.count('class="status-') == 1
    timed = pivot(frame, "plain", "time")
    assert ">oom</td>" in timed and "pred." not in timed


def test_the_manifest_table_flattens_nested_keys_and_says_when_there_is_none():
    html = manifest_table(MANIFEST)
    assert "<th class=\"text\">settings.device</th><td class=\"text\">cpu</td>" in html
    assert "environment.torch_version" in html and "scenario.max_len" in html
    assert manifest_table({}) == "<p>No manifest.json in this run.</p>"
