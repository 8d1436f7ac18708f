"""The layout's promises (docs/architecture.md), checked by reading the source.

Layers only point down, at package level: every package (or top-level module) has a
layer (``LAYERS``), and each import goes to its own package or to a package of a lower
layer, never up and never sideways to another package of the same layer. No import cycles
between modules either. Imports inside functions count too: a cycle hidden in a function
is still a cycle. And the data model imports no torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from source_tree import source_paths

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGE = {"tests", "scripts", "docs", ".venv", "runs", "build", "dist"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in source_paths(ROOT):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_PACKAGE or rel.parts[0].startswith("."):
            continue
        found[("attnprof." + ".".join(rel.with_suffix("").parts)).removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> set[str]:
    """The dotted names a module imports anywhere in its body; ``from X import n`` names
    X.n where that is a module (then X is only the way there), else X."""
    mods = _modules()
    deps = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & set(mods)
            deps.update(subs if len(subs) == len(node.names) else subs | {node.module})
        elif isinstance(node, ast.Import):
            deps.update(alias.name for alias in node.names)
    return deps


def import_graph() -> dict[str, set[str]]:
    """module -> the attnprof modules it imports anywhere in its body."""
    mods = _modules()
    return {name: {d for d in _imports(path) if d in mods and d != name} for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on_stack.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    assert "attnprof.profiler.records" in graph and "attnprof.cli" in graph
    assert cycles(graph) == []


@pytest.mark.parametrize("module", ["attnprof.profiler.records", "attnprof.profiler.units", "attnprof.errors"])
def test_the_data_model_imports_no_heavy_library(module):
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


# --- layers (#23): the package order of docs/architecture.md ---------------------------------
# Bottom -> top. A package may import its own package and packages of LOWER layers only; two
# packages of one layer never import each other. Keep this table and docs/architecture.md's
# map in step: this is the one statement of the order that is checked.
LAYERS = (
    ("L0a", {"attnprof", "profiler", "errors", "profiler.units", "profiler.lifeline", "profiler.aten_ops",
             "profiler.safe_points", "profiler.failure_text"}),
    ("L0b", {"profiler.records", "profiler.safeio", "profiler.collector", "profiler.forks"}),  # the data model, I/O
    ("L1", {"scenarios"}),
    ("L2", {"profiler.hardware"}),  # the GPU spec table, read by both models
    ("L3a", {"profiler.gpumeasure"}),  # measuring a real GPU
    ("L3b", {"profiler.measure"}),  # measuring a point on the CPU (may use gpumeasure)
    ("L4", {"profiler.memmodel", "profiler.timemodel"}),  # the two models of one point: GPU memory, time
    ("L5a", {"profiler.predict"}),  # predicting many points
    ("L5b", {"profiler.timeline"}),  # a point's predicted timeline (snapshot, trace): reads predict and both models
    ("L6", {"profiler.runner"}),
    ("L7a", {"profiler.gate"}),
    ("L7b", {"reports"}),
    ("L8a", {"arguments"}),
    ("L8b", {"api"}),
    ("L9a", {"cli_options", "cli_exits"}),  # the CLI's shared flags (from scenarios/fields.py); how commands end
    ("L9b", {"cli"}),
    ("L9c", {"__main__"}),
)
LAYER_OF = {package: rank for rank, (_, packages) in enumerate(LAYERS) for package in packages}
# KNOWN: package edges that break the order today and that other changes of #23 remove
# (they are merged separately). The test fails on any other bad edge, and on an entry here
# that no longer exists: empty this once they are gone.
KNOWN: dict = {}


def package_of(module: str) -> str:
    """'attnprof.profiler.measure.compose' -> 'profiler.measure'; 'attnprof.reports.page' -> 'reports'."""
    parts = module.split(".")[1:]
    if not parts:
        return "attnprof"
    if parts[0] == "profiler":
        return ".".join(parts[:2])
    return parts[0]


def package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(package_of(a), package_of(b)) for a, deps in graph.items() for b in deps
            if package_of(a) != package_of(b)}


def layer_problems(edges: set[tuple[str, str]], layer_of: dict[str, int]) -> list[str]:
    """Every edge that goes up, or sideways between two packages of one layer, and every
    package with no layer."""
    out = [f"{p}: in no layer (add it to LAYERS)" for p in sorted({p for e in edges for p in e} - set(layer_of))]
    for src, dst in sorted(edges):
        if src == dst or src not in layer_of or dst not in layer_of:
            continue
        if layer_of[dst] > layer_of[src]:
            out.append(f"{src} -> {dst}: upward")
        elif layer_of[dst] == layer_of[src]:
            out.append(f"{src} -> {dst}: sideways")
    return out


def test_every_package_has_a_layer():
    packages = {package_of(m) for m in _modules()}
    assert {"profiler.records", "profiler.hardware", "profiler.gpumeasure", "profiler.memmodel", "cli"} <= packages
    assert sorted(packages - set(LAYER_OF)) == []


@pytest.mark.parametrize("edge", [
    ("profiler.memmodel", "profiler.runner"),  # the gpu model calling the runner's budget search
    ("profiler.memmodel", "profiler.timemodel"),  # the gpu model adding time fields
    ("profiler.timemodel", "profiler.memmodel"),  # the time model reading a GPU table kept in the memory model
    ("profiler.records", "scenarios"),  # the data model parsing a variant
    ("profiler.gpumeasure", "profiler.measure"),  # measure may use gpumeasure, never the reverse
    ("profiler.forks", "profiler.runner"),  # forks lives at the bottom
    ("profiler.predict", "reports"),
])
def test_the_layer_check_flags_an_edge_that_goes_up_or_sideways(edge):
    problems = layer_problems({edge}, LAYER_OF)
    assert len(problems) == 1 and problems[0].startswith(f"{edge[0]} -> {edge[1]}: ")


@pytest.mark.parametrize("edge", [
    ("profiler.runner", "profiler.memmodel"),  # runner/estimate asking the memory model: downward
    ("profiler.timemodel", "profiler.hardware"),  # both models read the one GPU table
    ("profiler.memmodel", "profiler.hardware"),
    ("profiler.timemodel", "profiler.measure"),
    ("profiler.measure", "profiler.gpumeasure"),
    ("scenarios", "profiler.records"),
])
def test_the_layer_check_lets_a_downward_edge_pass(edge):
    assert layer_problems({edge}, LAYER_OF) == []


def test_the_layer_check_flags_a_package_with_no_layer():
    assert layer_problems({("profiler.nowhere", "errors")}, LAYER_OF) == ["profiler.nowhere: in no layer (add it to LAYERS)"]


def test_layers_only_point_down():
    edges = package_edges(import_graph())
    assert ("profiler.timemodel", "profiler.hardware") in edges  # the graph is read at all
    known = {f"{src} -> {dst}" for src, dst in KNOWN}
    problems = layer_problems(edges, LAYER_OF)
    assert [p for p in problems if p.split(": ")[0] not in known] == []
    assert sorted(known - {p.split(": ")[0] for p in problems}) == [], "gone: remove it from KNOWN"


# --- fork safety (#22): one constructor for fake modes, no CUDA query outside gpumeasure -------
def _calls(path: Path) -> list[str]:
    """Dotted names of everything called in a module, e.g. 'torch.cuda.is_available'."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            parts, target = [], node.func
            while isinstance(target, ast.Attribute):
                parts.append(target.attr)
                target = target.value
            if isinstance(target, ast.Name):
                parts.append(target.id)
            out.append(".".join(reversed(parts)))
    return out


def test_every_fake_mode_is_built_by_the_one_constructor():
    """A FakeTensorMode built anywhere else would ask torch.cuda.is_available() on every op."""
    home = ROOT / "profiler" / "measure" / "internals.py"
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _modules().values() if path != home
                 for name in _calls(path) if name.split(".")[-1] in ("FakeTensorMode", "QuickFakeTensorMode",
                                                                   "CpuFakeTensorMode")]
    assert offenders == []


def test_no_cuda_device_query_outside_the_processes_that_may_make_one():
    """is_available / device_count / mem_get_info poison fork (torch/csrc/cuda/Module.cpp):
    only gpumeasure/devices.py (a throw-away probe process, or CUDA already initialised) and
    code that runs in a point's own worker process may call them."""
    gpumeasure = ROOT / "profiler" / "gpumeasure"
    allowed = {gpumeasure / "devices.py", gpumeasure / "nvml.py", gpumeasure / "allocator_pass.py",
               gpumeasure / "gpu_facts.py", ROOT / "profiler" / "measure" / "timing.py",
               ROOT / "profiler" / "runner" / "worker.py"}
    queries = ("cuda.is_available", "cuda.device_count", "cuda.mem_get_info", "cuda.get_device_properties",
               "cuda.current_device", "_cuda_getDeviceCount")
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _modules().values() if path not in allowed
                 for name in _calls(path) if name.endswith(queries)]
    assert offenders == []


# --- one idea per name, small files (#23) -------------------------------------------------
def test_no_two_modules_inside_profiler_share_a_basename():
    """measure/gpu.py beside gpu/, two kernels.py, two model.py: a name must say which idea."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "profiler").rglob("*.py"):
        if path.name not in ("__init__.py", "errors.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


MAX_LINES = 400


def test_a_source_file_above_400_lines_says_why_its_size_is_earned():
    """The docstring of a module over MAX_LINES lines explains its size ("... over 400 lines
    because ..."); every other module stays under it."""
    unexplained = []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "over 400 lines because" not in " ".join(doc.split()):
                unexplained.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert unexplained == []


def test_pyproject_installs_every_package_and_nothing_else():
    """A package folder missing from pyproject's list is missing from an install (the
    editable one too); a listed one that is gone fails the install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {("attnprof." + ".".join(p.parent.relative_to(ROOT).parts)).rstrip(".")
               for p in source_paths(ROOT) if p.name == "__init__.py"
               if not NOT_PACKAGE & set(p.relative_to(ROOT).parts) and not p.relative_to(ROOT).parts[0].startswith(".")}
    assert listed == folders
