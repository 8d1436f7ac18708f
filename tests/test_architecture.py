"""The layout's promises (docs/architecture.md), checked by reading the source.

No import cycles between attnprof's modules (imports inside functions count too: a
cycle hidden in a function is still a cycle), and the data model imports no torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGE = {"tests", "scripts", "docs", ".venv", "runs", "build", "dist"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_PACKAGE or rel.parts[0].startswith("."):
            continue
        found[("attnprof." + ".".join(rel.with_suffix("").parts)).removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the attnprof modules it imports anywhere in its body."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


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


# --- fork safety (#22): one constructor for fake modes, no CUDA query outside measure/devices ----
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
    only gpugpumeasure/devices.py (a throw-away probe process, or CUDA already initialised) and
    code that runs in a point's own worker process may call them."""
    allowed = {ROOT / "profiler" / "measure" / "devices.py", ROOT / "profiler" / "measure" / "gpu.py",
               ROOT / "profiler" / "measure" / "timing.py", ROOT / "profiler" / "runner" / "worker.py"}
    queries = ("cuda.is_available", "cuda.device_count", "cuda.mem_get_info", "cuda.get_device_properties",
               "cuda.current_device", "_cuda_getDeviceCount")
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in _modules().values() if path not in allowed
                 for name in _calls(path) if name.endswith(queries)]
    assert offenders == []
