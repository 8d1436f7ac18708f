"""A report of a run folder parses each built-in label it resolves at most once per
process (the scaling table and the capacity chart of all its series share the parse),
and nothing on a second render; with ``seconds=0`` nothing is predicted. Counted at the
one parse function, registry.parse_variant (issue 23)."""

from __future__ import annotations

import pytest

from attnprof.reports.render import render_report

from tests.reports.conftest import ci_records, write_run


@pytest.mark.slow
def test_rendering_a_report_parses_each_builtin_label_at_most_once_then_never(parses, tmp_path):
    run = write_run(tmp_path / "run", ci_records())
    render_report(run, tmp_path / "a.html", None, seconds=0)
    assert len(parses) == len(set(parses)) <= len({r.variant for r in ci_records()})
    parses.clear()
    render_report(run, tmp_path / "b.html", None, seconds=0)
    assert parses == []
