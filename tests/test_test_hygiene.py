"""The suite's own rules, checked on its source (AST, no imports of the tests):

- no test reads a private attribute of attnprof's code: ``X._name`` (one leading underscore,
  not a dunder) where ``_name`` is defined in attnprof's source, a ``from attnprof... import
  _name``, or ``monkeypatch.setattr(X, "_name", ...)`` / ``getattr``/``setattr``/``hasattr``
  of one. torch's, pytest's and the standard library's privates (``torch._C``,
  ``torch._subclasses``, ``FakeTensorMode._cache_key``) are theirs to read: an attribute is
  allowed when the name it hangs off is imported from outside attnprof. A test that needs
  something private asks the module for a small public API instead.
- no unit test asserts on elapsed time (``time.monotonic``/``perf_counter``/``time.time``):
  a busy machine fails it, an idle one hides a regression. Speed lives in scripts/bench_*.py;
  a test checks the property behind the speed (an order, a flag, a count, a process state).

Each rule has a PENDING list: reads in files other helpers of issue #23 were rewriting
while this guard was written. The integrator empties them after merging; an entry that no
longer occurs fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from source_tree import source_paths

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NOT_SOURCE = {"tests", "scripts", "docs", ".venv", ".git", "build", "dist"}

# PENDING: test file -> private names it may still read while a change moves them (empty: none)
PENDING_PRIVATE_READS: dict[str, set[str]] = {}

# PENDING: test file -> test functions that may still assert on elapsed time (empty: none)
PENDING_TIMING_ASSERTS: dict[str, set[str]] = {}

CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
NAME_ARGUMENT_CALLS = {"setattr", "getattr", "hasattr", "delattr"}


def private(name: str) -> bool:
    return len(name) > 1 and name.startswith("_") and not name.startswith("__")


def source_files() -> list[Path]:
    return sorted(p for p in source_paths(ROOT) if not NOT_SOURCE & set(p.relative_to(ROOT).parts))


def suite_files() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def defined_names(tree: ast.AST) -> set[str]:
    """Every private name a module defines: functions, classes, assignments (module, class,
    local, ``self._x = ...``) and import aliases."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
    return {name for name in out if private(name)}


def imported_roots(tree: ast.AST) -> dict[str, bool]:
    """Local name -> whether it was imported from attnprof."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name.split(".")[0] == "attnprof"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                out[a.asname or a.name] = node.module.split(".")[0] == "attnprof"
    return out


def root_name(node: ast.AST) -> str | None:
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def private_reads(path: Path, attnprof_names: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    imports, own = imported_roots(tree), defined_names(tree)

    def attnprofs(owner: ast.AST, name: str) -> bool:
        if name not in attnprof_names:
            return False  # os._exit, torch._C, v._cdata: nothing of attnprof's is called that
        root = root_name(owner)
        if root in imports:
            return imports[root]  # hung off something imported: attnprof's, or torch's/stdlib's
        return name not in own  # a local object: a test's own class may use the name too

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and attnprofs(node.value, node.attr):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "attnprof":
            found.update(a.name for a in node.names if private(a.name))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called not in NAME_ARGUMENT_CALLS:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):  # setattr("pkg.mod._x", v)
                dotted = first.value.split(".")
                if dotted[0] == "attnprof" and private(dotted[-1]):
                    found.add(dotted[-1])
            elif len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str) and private(node.args[1].value) \
                    and attnprofs(first, node.args[1].value):
                found.add(node.args[1].value)
    return found


def attnprof_private_names() -> set[str]:
    out = set()
    for path in source_files():
        out |= defined_names(ast.parse(path.read_text(), str(path)))
    return out


def test_no_test_reads_a_private_attribute_of_attnprof():
    names = attnprof_private_names()
    assert {"_quick_keys", "_live", "_verdict"} <= names  # the scan sees attnprof's privates
    found = {}
    for path in suite_files():
        reads = private_reads(path, names)
        if reads:
            found[path.relative_to(ROOT).as_posix()] = reads
    new = {p: sorted(r - PENDING_PRIVATE_READS.get(p, set())) for p, r in found.items()}
    new = {p: r for p, r in new.items() if r}
    stale = {p: sorted(r - found.get(p, set())) for p, r in PENDING_PRIVATE_READS.items()}
    stale = {p: r for p, r in stale.items() if r}
    assert not new, f"tests read attnprof's private attributes (give the module a public API): {new}"
    assert not stale, f"no longer read: remove from PENDING_PRIVATE_READS: {stale}"


def clock_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
         and root_name(node.func.value) == "time") or (isinstance(node.func, ast.Name) and node.func.id in CLOCKS
                                                        and node.func.id != "time"))


def timing_asserts(path: Path) -> set[str]:
    """The test functions of ``path`` with an ``assert`` on a clock reading: a clock call
    in the assert, or a name assigned from one (directly or through another such name)."""
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        timed: set[str] = set()
        for _ in range(3):  # names from names from the clock
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and any(
                        clock_call(n) or (isinstance(n, ast.Name) and n.id in timed) for n in ast.walk(node.value)):
                    timed.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(func):
            if isinstance(node, ast.Assert) and any(
                    isinstance(n, ast.Compare) and any(clock_call(m) or (isinstance(m, ast.Name) and m.id in timed)
                                                       for m in ast.walk(n)) for n in ast.walk(node.test)):
                out.add(func.name)
    return out


def test_the_timing_scan_sees_an_elapsed_time_assert(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("import time\n\ndef test_fast():\n    started = time.monotonic()\n    work()\n"
                      "    took = time.monotonic() - started\n    assert took < 5\n\n"
                      "def test_deadline_loop():\n    deadline = time.monotonic() + 30\n"
                      "    while time.monotonic() < deadline:\n        pass\n    assert done()\n")
    assert timing_asserts(sample) == {"test_fast"}


@pytest.mark.parametrize("path", suite_files(), ids=lambda p: p.relative_to(TESTS).as_posix())
def test_no_unit_test_asserts_on_elapsed_time(path):
    name = path.relative_to(ROOT).as_posix()
    found = timing_asserts(path)
    pending = PENDING_TIMING_ASSERTS.get(name, set())
    assert not found - pending, f"{name}: assert on elapsed time in {sorted(found - pending)}; " \
                                f"check the property instead, put the speed in scripts/bench_*.py"
    assert not pending - found, f"{name}: no longer timed: remove {sorted(pending - found)} from PENDING"
