"""User strings in the gate's Markdown and terminal output: shown verbatim, never markup.

A variant label, a status reason, a scenario or device name comes from a file anyone can
edit. In the GitHub step summary it must stay inside its code span (no raw HTML, no
link, no extra table cell); in the terminal it must stay on its line."""

import json
from html.parser import HTMLParser

import pytest

from attnprof.profiler.gate import compare, format_markdown, format_table, run_gate, update_baseline
from attnprof.profiler.gate.baseline import printable
from attnprof.profiler.gate.markdown import code, format_error_markdown
from attnprof.profiler.records import PointRecord
from attnprof.profiler.runner.storage import append_record
from attnprof.scenarios.scenario import Scenario

HOSTILE = ["`<img src=x onerror=alert(1)>`", "<script>alert(1)</script>", "a|b", "x``y`", "line\nbreak",
           "q\"uo'te", "a\\|b", "[link](javascript:alert(1))", "**bold** _it_", "\x1b[31mred", " `"]
MiB = 1 << 20
ALIGN = {("style", "text-align:right")}  # the table's number columns: the only attribute
SAFE_TAGS = {"h3", "p", "code", "ul", "li", "strong", "details", "summary", "table", "thead", "tbody", "tr", "th",
             "td"}


def hostile_run(path, scale=1.0, reason="", skip=()):
    path.mkdir(parents=True)
    manifest = {"scenario": {**Scenario(name="ci", d_model=64, heads=4, layers=2).to_dict(),
                             "name": "ci <b>`x`</b>"},
                "environment": {"device": "cpu", "device_name": "CPU | <img src=x onerror=alert(2)>"}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    for i, label in enumerate(HOSTILE):
        if label in skip:
            continue
        peak = int((i + 2) * MiB * (scale if i == 0 else 1.0))
        failed = bool(reason) and i == 1
        append_record(path, PointRecord(
            variant=label, mode="plain", scope="model", seq_len=256, batch=1, d_model=64, heads=4, head_dim=16,
            layers=2, dtype="float32", status="crashed" if failed else "ok", reason=reason if failed else "",
            predicted_peak_bytes=peak, measured_peak_bytes=None if failed else peak,
            measured_by="" if failed else "tensor-tracker", time_fwd_ms=1.0, time_bwd_ms=2.0))
    return path


@pytest.fixture
def result(tmp_path):
    """Every kind of line: a regression (the first label), a crashed point with a hostile
    reason, an improvement and points allowed missing."""
    base = hostile_run(tmp_path / "base <i>`b`</i>")
    path = tmp_path / "baseline `|`.json"
    update_baseline(path, base)
    doc = json.loads(path.read_text())
    doc["points"][2]["measured_peak_bytes"] *= 2  # the run's is half: improved
    path.write_text(json.dumps(doc))
    run = hostile_run(tmp_path / "run", scale=1.5, reason="<img src=x onerror=alert(3)>\n| `", skip=(HOSTILE[-1],))
    return compare(path, run, allow_missing=True)


class Html(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.tags, self.attrs, self.code, self._in_code = [], [], [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        self._in_code = tag == "code"
        if self._in_code:
            self.code.append("")

    def handle_endtag(self, tag):
        self._in_code = False if tag == "code" else self._in_code

    def handle_data(self, data):
        if self._in_code:
            self.code[-1] += data


def render(markdown: str) -> Html:
    markdown_it = pytest.importorskip("markdown_it")
    return Html(markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown))


def test_markdown_shows_hostile_strings_verbatim_and_never_as_markup(result):
    assert result.regressions and result.improvements and result.missing
    text = format_markdown(result)
    page = render(text)
    assert set(page.tags) <= SAFE_TAGS, set(page.tags) - SAFE_TAGS
    assert set(page.attrs) <= ALIGN  # no onerror, no href, no src
    shown = "\n".join(page.code)
    for label in HOSTILE:
        assert printable(label).strip() in shown, label
    assert "ci <b>`x`</b>" in shown and "CPU | <img src=x onerror=alert(2)>" in shown
    assert "<img src=x onerror=alert(3)>\\n| `" in shown


def test_table_rows_keep_their_six_cells(result):
    rows = [line for line in format_markdown(result).splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(result.comparisons)
    page = render(format_markdown(result))
    assert page.tags.count("tr") == len(rows)
    assert page.tags.count("td") == 6 * len(result.comparisons)


def test_terminal_output_keeps_each_label_on_its_line(result):
    text = format_table(result)
    assert "line\nbreak" not in text and "line\\nbreak" in text and "\x1b" not in text
    table = text.split("\n\n", 1)[0]
    assert len(table.splitlines()) == 1 + len(result.comparisons)


def test_error_markdown_is_a_code_span_too():
    page = render(format_error_markdown("baseline `x` <img src=x onerror=alert(1)> is | broken"))
    assert "img" not in page.tags and page.attrs == []
    assert page.code == ["error: baseline `x` <img src=x onerror=alert(1)> is | broken"]


@pytest.mark.parametrize("text", ["plain", "`", "``", "a`b", "`a`", " a ", "", "   ", "x\ny", "|"])
def test_a_code_span_shows_exactly_its_text(text):
    page = render(f"before {code(text)} after")
    assert page.code == [printable(text) or " "]


def test_summary_file_of_a_hostile_run(tmp_path, result, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    lines = []
    assert run_gate(result.baseline_path, result.run_dir, allow_missing=True, out=lines.append) == 1
    page = render(summary.read_text())
    assert set(page.tags) <= SAFE_TAGS and set(page.attrs) <= ALIGN
