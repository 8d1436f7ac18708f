from time import perf_counter as wall_clock  # bound now: some tests monkeypatch time.perf_counter

import pytest
import torch

# A test that runs longer than this is marked ``@pytest.mark.slow`` (``-m "not slow"`` then
# leaves it out); one that is not is named at the end of the run: a note, never a failure.
SLOW_S = 5.0
UNMARKED_SLOW: list[tuple[float, str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    started = wall_clock()
    yield
    took = wall_clock() - started
    if took > SLOW_S and item.get_closest_marker("slow") is None:
        UNMARKED_SLOW.append((took, item.nodeid))


def pytest_terminal_summary(terminalreporter):
    if UNMARKED_SLOW:
        terminalreporter.section(f"tests over {SLOW_S:.0f} s without @pytest.mark.slow (a note, not a failure)")
        for took, nodeid in sorted(UNMARKED_SLOW, reverse=True):
            terminalreporter.write_line(f"{took:6.1f} s  {nodeid}")


@pytest.fixture(autouse=True)
def seed():
    """Every test starts from the same RNG state and the default dtype."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(autouse=True)
def prediction_cache_dir(tmp_path_factory, monkeypatch):
    """Every test predicts into a fresh, empty prediction cache of its own: none ever reads
    or writes the user's (~/.cache/attnprof), and no test sees another's entries."""
    path = tmp_path_factory.mktemp("attnprof-cache")
    monkeypatch.setenv("ATTNPROF_CACHE_DIR", str(path))
    return path


# Plausible figures of a small CPU, for every test that predicts a time (predict, sweep):
# no test spends seconds calibrating, and predicted times do not depend on the machine.
# tests/profiler/timemodel call the real measurement (``real_calibration``) where they need it.
STUB_CALIBRATION = dict(gemm_flops_per_s={"float32": 1e11, "bfloat16": 2e11},
                        attention_fwd_flops_per_s={"float32": 5e10, "bfloat16": 5e10},
                        attention_bwd_flops_per_s={"float32": 3e10, "bfloat16": 3e10},
                        bandwidth_bytes_per_s=2e10, overhead_fwd_s=2e-6, overhead_bwd_s=4e-6)


@pytest.fixture(autouse=True)
def stub_calibration(monkeypatch):
    from attnprof.profiler.timemodel import calibrate

    real = calibrate.measure

    def measure(threads=None, budget_s=calibrate.BUDGET_S):
        host, cpu, version, threads = calibrate.describe_machine(threads)
        return calibrate.Calibration(host=host, cpu=cpu, torch_version=version, threads=threads,
                                     **STUB_CALIBRATION, measured_at="stub")

    monkeypatch.setattr(calibrate, "measure", measure)
    return real


@pytest.fixture
def parses(monkeypatch):
    """Every registry parse from here on (registry.parse_variant, the one parse function):
    a list of the labels parsed. tests/profiler/runner/test_parse_once.py and
    tests/reports/test_report_parses.py count with it."""
    from attnprof.scenarios.variants import registry

    seen: list = []
    parse = registry.parse_variant

    def counted(text, **kw):
        seen.append(text)
        return parse(text, **kw)

    monkeypatch.setattr(registry, "parse_variant", counted)
    return seen
