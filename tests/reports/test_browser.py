"""The report in a real browser: headless Chromium loads it with no console messages,
and every image decodes. Skipped where Chromium is not installed."""

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from attnprof.reports.render import render_report

from conftest import ci_records, synthetic_record, write_run

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # gitignored
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Test-only: injected into a copy of the report, never into the report itself. It records
# load errors and CSP violations from the start, and once everything has loaded writes
# what it found into the DOM, which --dump-dom prints.
CHECKER = """<script>
window.__problems = [];
addEventListener("error", e => __problems.push("error: " + (e.message || (e.target && e.target.tagName))), true);
document.addEventListener("securitypolicyviolation", e => __problems.push("csp: " + e.violatedDirective));
addEventListener("load", () => {
  const images = Array.from(document.images);
  const result = {images: images.length, problems: __problems,
                  undecoded: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt)};
  const out = document.createElement("pre");
  out.id = "attnprof-check";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if not found:
        pytest.skip("chromium not installed (.ci/run installs it with apt-get)")
    return found


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    """Console messages (errors, CSP violations, logs) as Chromium logs them: 'CONSOLE(..)' or ':CONSOLE:'."""
    return [line for line in stderr.splitlines() if re.search(r"CONSOLE[(:]", line)]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A small *real* run (every variant, two modes, two lengths), rendered against a
    baseline run folder that includes a plug-in name made of markup."""
    from attnprof.profiler.runner.sweep import SweepSettings, run_sweep
    from attnprof.scenarios.scenario import Scenario

    small = Scenario(name="browser", modes=("plain", "reversible"), min_len=128, max_len=256, d_model=32, heads=2,
                     layers=2, repeats=1, warmup=0)
    run = tmp_path_factory.mktemp("browser") / "run"
    run_sweep(small, run, SweepSettings(device="cpu", repeats=1, warmup=0, test_hook=""), show_progress=False)
    records = list(ci_records()) + [synthetic_record("<script>alert(1)</script>", "plain", n) for n in (256, 512)]
    base = write_run(tmp_path_factory.mktemp("base") / "run", records)
    return render_report(run, baseline=base, seconds=0)


@pytest.mark.slow
def test_report_loads_without_console_messages_and_screenshots(report, tmp_path):
    binary = chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    done = run_chromium(binary, tmp_path / "profile", "--window-size=1400,4000", f"--screenshot={shot}",
                        report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_lines(done.stderr) == []
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 50_000


def check_in_browser(report: Path, tmp_path: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """Load a checker copy of ``report`` and return what the checker found."""
    binary = chromium()
    page = report.read_text(encoding="utf-8")
    # The report's CSP allows no script; the checker copy allows inline script and nothing else.
    page = page.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1)
    checked = report.with_name("report-checked.html")
    checked.write_text(page.replace("<head>", "<head>" + CHECKER, 1), encoding="utf-8")
    done = run_chromium(binary, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", checked.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="attnprof-check">(.*?)</pre>', done.stdout, re.S)
    assert found, "the checker did not run: " + done.stderr[-2000:]
    return json.loads(unescape(found.group(1))), done


def test_every_image_decodes(report, tmp_path):
    result, done = check_in_browser(report, tmp_path)
    assert result == {"images": 5, "problems": [], "undecoded": []}  # memory, time, savings, capacity, time model
    assert console_lines(done.stderr) == []


def test_the_checker_catches_a_broken_and_a_remote_image(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src '
                    "'none'; img-src data:\"></head><body><img alt=\"broken\" src=\"data:image/png;base64,AAAA\">"
                    '<img alt="remote" src="http://example.invalid/x.png"></body></html>', encoding="utf-8")
    result, _ = check_in_browser(page, tmp_path)
    assert sorted(result["undecoded"]) == ["broken", "remote"]
    assert any(p.startswith("csp: img-src") for p in result["problems"])
