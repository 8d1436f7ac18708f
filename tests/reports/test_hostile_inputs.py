"""The report on hostile input: every user string escaped in every HTML context, and
files that are not what they claim give one line and exit 2, never a traceback."""

import json
import subprocess
import sys

import pytest

from attnprof.profiler.units import printable
from attnprof.reports.data import ReportError, check_records
from attnprof.reports.render import render_report

from conftest import MANIFEST, Page, ci_records, synthetic_record, write_run

HOSTILE = ["`<img src=x onerror=alert(1)>`", "a|b", "x``y`", "line\nbreak", "q\"uo'te", "</th><script>x</script>",
           "cost $\\frac{1}{2}$", "&amp; &lt;"]
DEEP = "[" * 200_000 + "]" * 200_000


def test_hostile_labels_reasons_and_names_are_text_everywhere(tmp_path):
    records = [synthetic_record(label, mode, n) for label in HOSTILE + ["sdpa"] for mode in ("plain", "checkpoint")
               for n in (256, 512)]
    records.append(synthetic_record(HOSTILE[0], "plain", 1024, status="crashed", reason='"><img src=x onerror=alert(2)>'))
    manifest = {**MANIFEST, "scenario": {**MANIFEST["scenario"], "name": '"><script>alert(3)</script>'},
                "environment": {**MANIFEST["environment"], "device_name": "GPU' onload='alert(4)"}}
    base = write_run(tmp_path / "base", records[:-1], manifest)
    run = write_run(tmp_path / "run", records, manifest)
    text = render_report(run, baseline=base, seconds=0).read_text(encoding="utf-8")
    page = Page(text)
    assert "script" not in page.tags and all(not k.startswith("on") for k, _ in page.attrs)
    assert [v[:22] for k, v in page.attrs if k == "src"] == ["data:image/png;base64,"] * 4
    assert page.tags.count("img") == 4 and page.tags.count("title") == 1
    shown = "".join(page.text)
    for label in HOSTILE:  # control characters spelled out (a newline as \n), markup as text
        assert printable(label) in shown, label
    assert "line\nbreak" not in shown
    assert '"><img src=x onerror=alert(2)>' in shown and '"><script>alert(3)</script>' in shown
    assert "GPU' onload='alert(4)" in shown


def test_report_diff_never_calls_time_a_regression(tmp_path):
    base = write_run(tmp_path / "base", ci_records(variants=("sdpa",)))
    slow = []
    for r in ci_records(variants=("sdpa",)):
        if (r.mode, r.seq_len) == ("plain", 512):
            r.time_fwd_ms, r.time_bwd_ms = 10 * r.time_fwd_ms, 10 * r.time_bwd_ms
        slow.append(r)
    text = render_report(write_run(tmp_path / "run", slow), baseline=base, seconds=0).read_text(encoding="utf-8")
    assert '<tr class="slower">' in text and '<tr class="regression">' not in text


@pytest.mark.parametrize("value, fragment", [
    ({"variant": ["full"]}, "variant must be a string"),
    ({"seq_len": None}, "seq_len is null"),
    ({"seq_len": 10 ** 30}, "seq_len must be a positive integer"),
    ({"measured_peak_bytes": "12 MiB"}, "measured_peak_bytes must be a byte count"),
    ({"time_fwd_ms": float("inf")}, "time_fwd_ms must be a finite number"),
    ({"status": "fine"}, "unknown status"),
    ({"reason": ["x"]}, "reason must be a string"),
])
def test_records_are_checked_before_pandas_sees_them(value, fragment):
    record = {**synthetic_record("sdpa", "plain", 256).to_row(), **value}
    with pytest.raises(ReportError, match=fragment) as info:
        check_records([record], "run x")
    assert "\n" not in str(info.value)


def report_cli(*args):
    return subprocess.run([sys.executable, "-m", "attnprof", "report", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def good_line(**change) -> str:
    return json.dumps({**synthetic_record("sdpa", "plain", 256).to_row(), **change})


BAD_RESULTS = {
    "binary": b"\xff\xfe\x00\x81garbage\n",
    "non-object": b"[1, 2]\n42\nnull\n",
    "list for a string": (good_line(variant=["sdpa"]) + "\n").encode(),
    "missing fields": b'{"variant": "sdpa", "mode": "plain"}\n',
    "null seq_len": (good_line(seq_len=None) + "\n").encode(),
    "deep nesting": (DEEP + "\n").encode(),
}


@pytest.mark.slow
def test_cli_report_errors_are_one_line_and_exit_2(tmp_path):
    cases = []
    for name, content in BAD_RESULTS.items():
        run = write_run(tmp_path / name.replace(" ", "-"), [])
        (run / "results.jsonl").write_bytes(content)
        cases.append((name, [run]))
    deep_manifest = write_run(tmp_path / "deep-manifest", [synthetic_record("sdpa", "plain", 256)])
    (deep_manifest / "manifest.json").write_text(DEEP)
    cases.append(("deep manifest", [deep_manifest]))
    good = write_run(tmp_path / "good", [synthetic_record("sdpa", "plain", 256)])
    cases.append(("deep baseline run", [good, "--baseline", tmp_path / "deep-nesting"]))
    for name, args in cases:
        done = report_cli(*args)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, (name, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, name
