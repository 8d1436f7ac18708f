"""A GPU table file is data from anywhere: only a small regular file is read, and read
without blocking; its figures must be plausible for a GPU; its keys are unique however
they are spelled; an entry under a built-in key says so wherever it is printed; and a
name's control characters are spelled out, never sent to the terminal."""

import os
import subprocess
import sys
import tomllib

import pytest

from attnprof.profiler.hardware.gpus import (BOUNDS, BUILTIN_FILE, ENV_VAR, MAX_FILE_BYTES, GpuTableError, format_gpus,
                                         load_gpus, read_table)
from gpu_samples import MY_CARD_TOML

GOOD = MY_CARD_TOML


@pytest.fixture(autouse=True)
def no_user_table(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def attnprof(*args, timeout=60):
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    return subprocess.run([sys.executable, "-m", "attnprof", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_only_a_small_regular_file_is_read_and_never_blocks(tmp_path):
    fifo = tmp_path / "gpus.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text(GOOD + "#" * MAX_FILE_BYTES)
    for path, words in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"), (tmp_path, "a folder"),
                        (big, f"at most {MAX_FILE_BYTES}")):
        with pytest.raises(GpuTableError, match=words):
            read_table(path)
        # the CLI too: one line, exit 2, and never a hang (a FIFO without a writer) or MemoryError
        assert words in one_error_line(attnprof("gpus", "--gpu-file", str(path)))


@pytest.mark.parametrize("old,new,field", [
    ("memory_bytes = 17_179_869_184", "memory_bytes = 1_125_899_906_842_624", "'memory_bytes'"),  # 1 PiB
    ("memory_bytes = 17_179_869_184", "memory_bytes = 536_870_912", "'memory_bytes'"),  # 512 MiB
    ("bandwidth_bytes_per_s = 1.0e12", "bandwidth_bytes_per_s = 1e300", "'bandwidth_bytes_per_s'"),
    ("bandwidth_bytes_per_s = 1.0e12", "bandwidth_bytes_per_s = 1e6", "'bandwidth_bytes_per_s'"),
    ("bf16 = 142.0", "bf16 = 1e300", "'tflops.bf16'"),
    ("fp32 = 35.6", "fp32 = 0.001", "'tflops.fp32'"),
    ("sm_count = 84", "sm_count = 1_000_000_000_000", "'sm_count'"),
    ("sm_count = 84", "sm_count = 84\ncontext_bytes = 17_179_869_184", "'context_bytes'"),
])
def test_implausible_figures_are_named(tmp_path, old, new, field):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(GpuTableError, match=field) as info:
        read_table(path)
    assert "\n" not in str(info.value) and "my-card" in str(info.value)


def test_the_bounds_are_a_factor_of_100_around_the_builtin_table():
    """The comment beside BOUNDS says how they were derived; this derives them again, so an
    edit of gpus.toml that moves its extremes must move them too."""
    gpus = tomllib.loads(BUILTIN_FILE.read_text())["gpus"].values()
    for field, values in (("bandwidth_bytes_per_s", [g["bandwidth_bytes_per_s"] for g in gpus]),
                          ("tflops", [v for g in gpus for v in g["tflops"].values()])):
        assert BOUNDS[field] == pytest.approx((min(values) / 100, max(values) * 100)), field
    assert BOUNDS["sm_count"] == (1, max(g["sm_count"] for g in gpus) * 100)
    assert BOUNDS["memory_bytes"] == (1 << 30, 16 << 40)
    load_gpus()  # the built-in table passes its own bounds


def test_keys_are_case_folded_and_unique_in_a_file(tmp_path):
    path = tmp_path / "dup.toml"
    path.write_text(GOOD.replace("my-card", "TestGpu") + GOOD.replace("my-card", "testgpu").replace("My Card", "B"))
    with pytest.raises(GpuTableError, match="TestGpu.*testgpu.*case-insensitive"):
        read_table(path)
    assert "case-insensitive" in one_error_line(attnprof("gpus", "--gpu-file", str(path)))


@pytest.mark.slow
def test_an_entry_over_a_builtin_key_says_so_wherever_it_is_printed(tmp_path):
    path = tmp_path / "fake-h100.toml"
    path.write_text(GOOD.replace("my-card", "H100-SXM").replace("17_179_869_184", "1_073_741_824"))
    shown = f"h100-sxm (from {path}, overrides built-in)"
    table = load_gpus([path])
    assert table["h100-sxm"].overrides_builtin and table["h100-sxm"].label == shown
    assert not table["h200"].overrides_builtin and table["h200"].label == "h200"
    (tmp_path / "mine.toml").write_text(GOOD)
    assert not load_gpus([tmp_path / "mine.toml"])["my-card"].overrides_builtin  # a new key overrides nothing
    listing = attnprof("gpus", "--gpu-file", str(path))
    assert listing.returncode == 0 and shown in listing.stdout, listing.stderr
    predicted = attnprof("predict", "--variant", "sdpa", "--scope", "attention", "--seq-len", "256", "--d-model", "32",
                         "--heads", "2", "--gpu", "h100-sxm", "--gpu-file", str(path), timeout=300)
    assert predicted.returncode == 0, predicted.stderr
    assert shown in predicted.stdout
    budget = attnprof("predict", "--variant", "sdpa", "--scope", "attention", "--d-model", "32", "--heads", "2",
                      "--min-len", "256", "--max-len", "4096", "--budget", "1GiB", "--gpu", "h100-sxm", "--gpu-file", str(path),
                      timeout=300)
    assert budget.returncode == 0 and shown in budget.stdout, budget.stderr


def test_control_characters_in_a_name_are_spelled_out(tmp_path):
    path = tmp_path / "esc.toml"
    path.write_text(GOOD.replace('"My Card"', r'"Evil\u001b[2J\nCard\u202e"'))
    text = format_gpus(load_gpus([path]))
    assert "\x1b" not in text and "\u202e" not in text and r"Evil\x1b[2J\nCard\u202e" in text
    row = next(line for line in text.splitlines() if line.startswith("my-card "))
    assert row.endswith(r"Evil\x1b[2J\nCard\u202e")  # one row: the newline did not break it
    listing = attnprof("gpus", "--gpu-file", str(path))
    assert listing.returncode == 0 and "\x1b" not in listing.stdout and r"\x1b[2J" in listing.stdout
