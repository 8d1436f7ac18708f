"""Devices side by side (issue 16): a ``sweep --gpu-types`` folder reports as one page
comparing its per-type run folders, and a single run over a mixed cluster separates its
series by device. The index is hostile input: only subfolders of OUT are ever read."""

import json
import os
from dataclasses import replace

import pytest

from attnprof.reports.data import GPU_TYPES_FILE, ReportError, load
from attnprof.reports.render import render_report

from conftest import MANIFEST, ci_records, write_run
from test_hostile_inputs import Page

VARIANTS, MODES, LENGTHS = ("full", "sdpa"), ("plain",), (256, 512)
HOSTILE_GPU = "H100 <script>alert(1)</script> $x$ & 'q\""


def device_run(folder, device_name, scale=1.0):
    records = [replace(r, device="cuda", device_name=device_name, host="node-" + str(scale))
               for r in ci_records(variants=VARIANTS, modes=MODES, lengths=LENGTHS, scale=scale)]
    manifest = {**MANIFEST, "environment": {**MANIFEST["environment"], "device_name": device_name}}
    return write_run(folder, records, manifest)


def gpu_types_folder(out, types: dict, index=None):
    """OUT/<TYPE>/ for each type (type -> device name) and OUT/gpu-types.json, as sweep writes them."""
    out.mkdir(parents=True, exist_ok=True)
    for i, (gpu_type, name) in enumerate(types.items()):
        device_run(out / gpu_type, name, scale=1.0 + i)
    index = index if index is not None else {"gpu_types": {t: t for t in types}, "gpus": {t: 8 for t in types}}
    (out / GPU_TYPES_FILE).write_text(json.dumps(index), encoding="utf-8")
    return out


def test_a_gpu_types_folder_is_one_report_with_a_series_per_device(tmp_path):
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "NVIDIA A100-SXM4-80GB", "H100": "NVIDIA H100 80GB HBM3"})
    run = load(out)
    assert set(run.parts) == {"A100", "H100"} and len(run.frame) == 2 * len(VARIANTS) * len(LENGTHS)
    series = set(run.frame["series"])
    assert series == {f"{v} on {d}" for v in VARIANTS for d in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")}
    # every series one device, one point per length: lines never merge
    assert (run.frame.groupby("series")["device_label"].nunique() == 1).all()
    assert not run.frame.duplicated(["series", "panel", "seq_len"]).any()
    html = render_report(out, seconds=0)
    assert html == out / "report.html"
    shown = "".join(Page(html.read_text(encoding="utf-8")).text)
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"):
        assert f"full on {name}" in shown and name in shown
    assert "2 devices side by side" in shown and "device" in shown


def test_a_type_not_run_yet_is_left_out_and_named(tmp_path):
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "A100"},
                           index={"gpu_types": {"A100": "A100", "H100": "H100"}, "gpus": {}})
    run = load(out)
    assert list(run.parts) == ["A100"] and "H100" in run.missing
    assert set(run.frame["series"]) == set(VARIANTS)  # one device: labels as before


def test_only_folders_the_index_lists_are_read(tmp_path):
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "A100", "H100": "H100"},
                           index={"gpu_types": {"A100": "A100"}})
    assert set(load(out).frame["device_label"]) == {"A100"}


def test_two_types_naming_the_same_device_stay_apart(tmp_path):
    out = gpu_types_folder(tmp_path / "cmp", {"A": "same GPU", "B": "same GPU"})
    frame = load(out).frame
    assert set(frame["device_label"]) == {"same GPU [A]", "same GPU [B]"}
    assert not frame.duplicated(["series", "panel", "seq_len"]).any()


@pytest.mark.parametrize("folder", ["../outside", "/tmp", "..", ".", "a/b", "a\\b", "", 7, None, ["A100"],
                                    "x\x00y"])
def test_an_index_naming_anything_but_a_subfolder_is_refused_in_one_line(tmp_path, folder):
    outside = device_run(tmp_path / "outside", "SECRET GPU")
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "A100"}, index={"gpu_types": {"A100": "A100", "evil": folder}})
    assert outside.is_dir()
    with pytest.raises(ReportError) as err:
        load(out)
    assert "\n" not in str(err.value) and "refused" in str(err.value)


def test_a_link_leading_out_of_the_folder_is_refused(tmp_path):
    device_run(tmp_path / "outside", "SECRET GPU")
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "A100"}, index={"gpu_types": {"A100": "A100", "X": "link"}})
    os.symlink(tmp_path / "outside", out / "link")
    with pytest.raises(ReportError, match="leads outside"):
        load(out)


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"gpu_types": []}', b'{"gpu_types": {}}', b"\xff\xfe",
                                     b"[" * 100_000 + b"]" * 100_000, b'{"gpus": {"A100": 1}}'])
def test_a_bad_index_is_one_line(tmp_path, content):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / GPU_TYPES_FILE).write_bytes(content)
    with pytest.raises(ReportError) as err:
        load(out)
    assert "\n" not in str(err.value) and GPU_TYPES_FILE in str(err.value)


def test_a_folder_with_neither_results_nor_index_still_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="has no results.jsonl"):
        load(tmp_path / "empty")


def test_a_mixed_cluster_run_separates_series_by_device(tmp_path):
    records = []
    for i, r in enumerate(ci_records(variants=VARIANTS, modes=MODES, lengths=(256, 512, 1024, 2048))):
        records.append(replace(r, device="cuda", device_name=("A100" if i % 2 else HOSTILE_GPU)))
    run_dir = write_run(tmp_path / "mixed", records)
    frame = load(run_dir).frame
    assert set(frame["device_label"]) == {"A100", HOSTILE_GPU}
    assert (frame.groupby("series")["device_label"].nunique() == 1).all()
    assert {f"full on {HOSTILE_GPU}", "full on A100"} <= set(frame["series"])
    text = render_report(run_dir, seconds=0).read_text(encoding="utf-8")
    page = Page(text)
    assert "script" not in page.tags and all(not k.startswith("on") for k, _ in page.attrs)
    shown = "".join(page.text)
    assert f"sdpa on {HOSTILE_GPU}" in shown and "A100" in shown


def test_one_device_keeps_the_plain_labels(tmp_path):
    run_dir = device_run(tmp_path / "one", "NVIDIA H100")
    assert set(load(run_dir).frame["series"]) == set(VARIANTS)


@pytest.mark.slow
def test_cli_refuses_an_index_leading_out_in_one_line_exit_2(tmp_path):
    from test_hostile_inputs import report_cli

    device_run(tmp_path / "outside", "SECRET GPU")
    out = gpu_types_folder(tmp_path / "cmp", {"A100": "A100"}, index={"gpu_types": {"A100": "A100", "X": "../outside"}})
    done = report_cli(out)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "refused" in done.stderr and not (out / "report.html").exists()
