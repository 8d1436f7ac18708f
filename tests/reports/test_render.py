"""The report page end to end: contents, self-containment, escaping, bad input."""

import base64
import re
import time
from html.parser import HTMLParser

import pytest
from matplotlib.image import imread

from attnprof.reports.render import ReportError, render_report

from conftest import CI_MODES, CI_VARIANTS, MANIFEST, ci_records, synthetic_record, write_run

EVIL = "<script>alert(1)</script>"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


@pytest.fixture(scope="module")
def ci_report(tmp_path_factory):
    """The report of a ci-sized run (3 lengths x 6 variants x 3 modes), predictions off."""
    run = write_run(tmp_path_factory.mktemp("ci") / "run", ci_records())
    start = time.perf_counter()
    out = render_report(run, seconds=0)
    print(f"\nci-sized report, no predictions: {time.perf_counter() - start:.2f} s")
    return out


def test_default_output_is_report_html_in_the_run_folder_with_pngs_beside_it(ci_report):
    assert ci_report.name == "report.html" and ci_report.parent.name == "run"
    pngs = sorted(p.name for p in ci_report.parent.glob("report-*.png"))
    assert pngs == ["report-capacity.png", "report-memory.png", "report-savings.png", "report-time.png"]
    for png in ci_report.parent.glob("report-*.png"):
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
        height, width, _ = imread(png).shape
        assert width > 400 and height > 200


def test_every_variant_and_mode_appears(ci_report):
    text = ci_report.read_text(encoding="utf-8")
    for variant in CI_VARIANTS:
        assert f'<th class="text">{variant}</th>' in text
    for mode in CI_MODES:
        assert f"<h3>{mode}: peak memory</h3>" in text and f"<h3>{mode}: forward + backward time</h3>" in text
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in text  # the OOM point's reason
    assert MANIFEST["environment"]["git_commit"] in text


def test_page_is_self_contained(ci_report):
    text = ci_report.read_text(encoding="utf-8")
    tags = Tags(text).tags
    refs = [v for _, attrs in tags for k, v in attrs.items() if k in ("src", "href", "srcset", "action", "data")]
    assert refs, "expected images and in-page links"
    for ref in refs:
        assert ref.startswith(("data:image/png;base64,", "#")), ref[:80]
    assert not re.search(r"https?://", " ".join(refs))
    assert not any(tag in ("script", "link", "iframe", "object", "embed") for tag, _ in tags)
    assert "url(" not in text  # no CSS fetches either


def test_embedded_images_are_the_png_files(ci_report):
    images = [attrs["src"] for tag, attrs in Tags(ci_report.read_text(encoding="utf-8")).tags if tag == "img"]
    files = {p.read_bytes() for p in ci_report.parent.glob("report-*.png")}
    assert len(images) == 4
    for src in images:
        assert base64.b64decode(src.split(",", 1)[1]) in files


def test_user_strings_are_escaped_never_markup(tmp_path):
    records = [synthetic_record(v, "plain", n) for v in ("sdpa", EVIL, "cost$in$dollars") for n in (256, 512)]
    records.append(synthetic_record(EVIL, "plain", 1024, status="crashed", reason='<img src=x onerror="alert(2)">'))
    manifest = {"environment": {"hostname": '"><script>alert(3)</script>', "device_name": "<b>gpu</b>"}}
    run = write_run(tmp_path / "evil <run>", records, manifest)
    text = render_report(run, seconds=0).read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in text
    assert "&lt;b&gt;gpu&lt;/b&gt;" in text and "evil &lt;run&gt;" in text
    tags = Tags(text).tags
    assert not any(tag in ("script", "b") for tag, _ in tags)
    assert not any(k.startswith("on") for _, attrs in tags for k in attrs)
    assert all(attrs["src"].startswith("data:") for tag, attrs in tags if tag == "img")
    assert "cost$in$dollars" in text


def test_unknown_variant_shows_a_question_mark_for_its_expected_exponents(tmp_path):
    run = write_run(tmp_path / "run", [synthetic_record(EVIL, "plain", n) for n in (256, 512)])
    text = render_report(run, seconds=0).read_text(encoding="utf-8")
    row = re.search(r'<tr><th class="text">&lt;script&gt;alert\(1\)&lt;/script&gt;</th><td class="text">plain</td>(.*?)</tr>',
                    text)
    assert row and row.group(1).count("<td>?</td>") == 2


def test_baseline_diff_highlights_changed_points(tmp_path):
    base = write_run(tmp_path / "base", ci_records())
    records = list(ci_records())
    for i, r in enumerate(records):
        if (r.variant, r.mode, r.seq_len) == ("lsh", "plain", 1024):  # twice the memory: a regression
            records[i] = synthetic_record("lsh", "plain", 1024, scale=2.0)
        if (r.variant, r.mode, r.seq_len) == ("full", "plain", 1024):  # was an OOM, now fits
            records[i] = synthetic_record("full", "plain", 1024)
    run = write_run(tmp_path / "run", records)
    out = render_report(run, tmp_path / "out" / "cmp.html", baseline=base, seconds=0)
    text = out.read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="(regression|improvement|changed|new|gone)"><th class="text">([^<]*)</th><td class="text">'
                      r'([^<]*)</td><td>([^<]*)</td>', text)
    assert ("regression", "lsh", "plain", "1K") in rows
    assert ("improvement", "full", "plain", "1K") in rows
    assert len(rows) == 2  # nothing else changed
    assert "+100.0%" in text and (tmp_path / "out" / "cmp-memory.png").exists()


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "folder not found"),
    (lambda p: _write(p / "file.txt", "x"), "is not a folder"),
    (lambda p: p, "has no results.jsonl"),
    (lambda p: _write(p / "results.jsonl", "").parent, "has no results yet"),
    (lambda p: _write(p / "results.jsonl", '{"oops": 1}\n').parent, r"lacks field\(s\) variant|holds no valid record"),
    (lambda p: _write(p / "results.jsonl", "[1, 2]\n").parent, "not records|holds no valid record"),
])
def test_bad_run_folders_raise_one_line_report_errors(tmp_path, make, message):
    with pytest.raises(ReportError) as info:
        render_report(make(tmp_path))
    assert re.search(message, str(info.value)) and "\n" not in str(info.value)


def test_bad_manifest_and_baseline_raise_report_errors(ci_run, tmp_path):
    with pytest.raises(ReportError, match=r"^baseline folder not found: ") as info:
        render_report(ci_run, baseline=tmp_path / "nope", seconds=0)
    assert "\n" not in str(info.value)
    (ci_run / "manifest.json").write_text("{not json\n\n")
    with pytest.raises(ReportError, match="is not valid JSON") as info:
        render_report(ci_run, seconds=0)
    assert "\n" not in str(info.value)
    (ci_run / "manifest.json").write_text("{}")
    with pytest.raises(ReportError, match="is a folder"):
        render_report(tmp_path / "run", output=tmp_path, seconds=0)


@pytest.mark.slow
def test_ci_sized_render_time_with_predictions(ci_run):
    """Not a timing assertion: prints what the default time budget gives."""
    start = time.perf_counter()
    out = render_report(ci_run)
    print(f"\nci-sized report, default budget: {time.perf_counter() - start:.2f} s")
    assert "What fits where" in out.read_text(encoding="utf-8")


def test_the_gpu_the_run_measured_on_is_a_budget_of_its_own(tmp_path):
    env = {**MANIFEST["environment"], "device": "cuda", "device_name": "NVIDIA H200",
           "device_memory_bytes": int(139.8 * (1 << 30))}
    run = write_run(tmp_path / "run", ci_records(variants=("sdpa",)), {**MANIFEST, "environment": env})
    text = render_report(run, seconds=0).read_text(encoding="utf-8")
    assert "<th class=\"text\">139.8 GiB</th><td class=\"text\">this run&#x27;s NVIDIA H200</td>" in text
    assert "Device: NVIDIA H200 (139.80 GiB)." in text
