"""FakeTensorMode without importing torch._dynamo: a prediction's fixed cost.

``FakeTensorMode()`` reads three flags of ``torch._dynamo.config``, and every
``TorchDispatchMode`` handler (the tracker's, the fake mode's own) is wrapped by
``torch._disable_dynamo``, which imports ``torch._dynamo`` on its first call to look up
``torch._dynamo.disable``. Importing the package runs its ``__init__``: the whole
compiler stack, sympy and torch.distributed, about as long as ``import torch`` itself
(measured: 1.0-1.4 s of a 1.5-2.2 s import on 2 cores), for a prediction that compiles
nothing.

``light_dynamo()`` stands in a module object made from the real package's spec with only
``config`` (loaded on its own: a small file) and ``disable``, which returns the function
unchanged (dynamo's disable matters only while dynamo traces, and nothing traces here).
Anything else asked of the stand-in (an attribute, a submodule) executes the real
package's ``__init__`` into that same module object, as ``importlib.util.LazyLoader``
does, so the stand-in *becomes* the real package. On exit the stand-in is removed
unless it became real, and the functions it "disabled" forget that, so a later real
``torch._dynamo.disable`` wraps them as torch would. A submodule (``torch._dynamo.source``:
FakeTensorMode imports it where it converts a real tensor, e.g. the 0-dim ``step`` tensors
torch.optim makes) is imported alone, without the package's ``__init__``. ``graph_break`` (torch.optim's step
calls it) does nothing, as the real one does outside compilation. Nothing changes when
``torch._dynamo`` is already imported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys

import torch

_PACKAGE = "torch._dynamo"


@contextlib.contextmanager
def light_dynamo():
    """Inside: ``torch._dynamo`` is a stand-in with ``config`` and a no-op ``disable``."""
    if _PACKAGE in sys.modules:  # the real one is here already: nothing to save
        yield
        return
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        yield
        return
    stand_in = importlib.util.module_from_spec(spec)
    passed_through: list = []

    def disable(fn=None, recursive=True, *args, **kwargs):
        if fn is None:  # @disable(recursive=...), or ``with disable():`` as the real one allows
            return _Decorator(lambda f: disable(f, recursive))
        passed_through.append(fn)
        return fn

    def become_real(name: str):
        """Module __getattr__ (PEP 562): a submodule is imported alone (``from . import utils``
        in ``torch._dynamo.source``, which the fake mode imports to convert a real tensor);
        anything else beyond config/disable loads the package."""
        namespace = stand_in.__dict__
        if "__getattr__" not in namespace:  # loading already (a circular lookup)
            raise AttributeError(name)
        if not name.startswith("__") and importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            before = set(sys.modules)
            module = importlib.import_module(f"{_PACKAGE}.{name}")
            _ALONE.update({k: sys.modules[k] for k in set(sys.modules) - before if k.startswith(_PACKAGE + ".")})
            return module
        del namespace["__getattr__"], namespace["disable"], namespace["graph_break"]
        spec.loader.exec_module(stand_in)
        return getattr(stand_in, name)

    stand_in.__getattr__ = become_real
    stand_in.disable = disable
    stand_in.graph_break = _graph_break
    sys.modules[_PACKAGE] = stand_in
    had_attr = "_dynamo" in torch.__dict__
    try:
        # a child of the stand-in: only config.py runs (or the module a previous stand-in left)
        stand_in.config = importlib.import_module(_PACKAGE + ".config")
        torch._dynamo = stand_in
        for key, module in _ALONE.items():  # submodules a previous stand-in imported alone
            sys.modules.setdefault(key, module)
            if key.count(".") == 2:
                setattr(stand_in, key.rsplit(".", 1)[1], module)
    except BaseException:
        _remove(stand_in, had_attr)
        raise
    try:
        yield
    finally:
        for fn in passed_through:  # torch._disable_dynamo caches the wrapper on the function
            try:  # (a class's __dict__ is a read-only mappingproxy: delattr, not pop)
                delattr(fn, "__dynamo_disable")
            except (AttributeError, TypeError):
                pass
        if "__getattr__" in stand_in.__dict__:  # never became real
            _remove(stand_in, had_attr)


class _Decorator:
    """What the stand-in's ``disable()`` without a function returns: a decorator, and, as the
    real ``DisableContext``, a ``with`` block (doing nothing: nothing compiles here)."""

    def __init__(self, wrap):
        self.wrap = wrap

    def __call__(self, fn):
        return self.wrap(fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def _graph_break(*args, **kwargs) -> None:
    """``torch._dynamo.graph_break`` outside compilation: nothing (torch.optim's ``step``
    calls it twice per step, and it is all an optimizer step asks of the package)."""


_ALONE: dict = {}  # "torch._dynamo.x" -> a submodule imported alone under a stand-in (kept for the next one)


def _remove(stand_in, had_attr: bool) -> None:
    if sys.modules.get(_PACKAGE) is stand_in:
        del sys.modules[_PACKAGE]
    for key, module in _ALONE.items():  # out of sight, so that a real import later loads its own
        if sys.modules.get(key) is module:
            del sys.modules[key]
    if torch.__dict__.get("_dynamo") is stand_in and not had_attr:
        del torch._dynamo
    # torch._dynamo.config stays in sys.modules: the real package, imported later, adopts it


def is_real_dynamo_loaded() -> bool:
    """Whether the real torch._dynamo package has been imported (benchmarks and tests ask)."""
    module = sys.modules.get(_PACKAGE)
    return module is not None and "__getattr__" not in vars(module)
