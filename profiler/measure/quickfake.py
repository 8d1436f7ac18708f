"""A FakeTensorMode whose dispatch-cache key costs microseconds, not a tenth of a millisecond.

A fast prediction is a fake run, and a fake run costs time per op: FakeTensorMode looks
every op up in its dispatch cache, and building the key (``FakeTensorMode._cache_key``:
each tensor argument's full metadata, flattened by a recursive Python walk) is about half
of an op's cost on a cache hit (measured: ~100 of ~200 us under cProfile, torch 2.13).

``QuickFakeTensorMode`` memoises that key. Its own key is a flat tuple of what torch's key
is made of, read straight off each argument: the op; the default dtype and device and
inference mode (torch's key's global state); the argument structure with every non-tensor
value and its type; and for each fake tensor its dtype, shape, stride, storage offset,
storage bytes, requires_grad, conj/neg/inference bits, layout and device: everything
``extract_tensor_metadata`` puts into torch's key, or derives from (memory format comes
from shape and stride; quantized/sparse from dtype and layout). Equal quick keys therefore
mean equal torch keys, and the memo hands back the torch key torch itself built the first
time; the cache lookup, bypass rules and output synthesis are torch's own, unchanged.

Views, natively. torch computes a fake ``view``'s layout with its Python reference
(``fake_impls._view_meta`` -> ``torch._refs._reshape_view_helper``: a chain of prims,
~1.5 ms per op, measured) on every cache miss, and on *every* ``_unsafe_view``, which
torch's cache never keeps ("unsafe view" bypass). QuickFakeTensorMode asks ATen's own
view on a meta tensor of the same sizes and strides (the C++ ``computeStride``, ~1 us)
and returns ``as_strided`` of the fake input with that layout: the same tensor (sizes,
strides, storage offset, storage). Anything it does not vouch for takes torch's path:
symbolic sizes, a shape environment, ``allow_copy``, no elements, zero dimensions, a
layout ATen cannot view (torch raises its own error). An ``_unsafe_view`` is asked of
``quick_view`` before torch's cache key is built at all (``_cached_dispatch_impl``): torch
would build it only to bypass its cache. The equality with torch's path is
tested case by case and through every prediction (tests/profiler/measure/test_quickfake.py).

View ops, natively (``native_view``). A view op (detach, t, transpose, view, expand,
permute, ...: over a third of a prediction's ops) costs ~50 us through torch's cache: the
key, the lookup, a meta tensor made and re-pointed at the input's storage, two dispatches.
For the view ops whose fake output torch itself computes by running the op's own meta
kernel in kernel invocation (``native_views`` reads that from torch: no Python
decomposition, special fake implementation or registered fake kernel comes first; ``view``,
whose special one quick_view already equals, too), QuickFakeTensorMode runs that meta
kernel straight away and wraps the output on the input's device, as torch's last leg does:
on a plain fake tensor of this mode, with int arguments, and otherwise torch's path
(measured: 7-8% of a warm 18-point prediction, results identical).

Anything unusual gets no quick key and takes torch's path: a tensor that is not this
mode's fake (or holds a constant), a symbolic value, a callable, an unknown argument
type, a shape environment, proxy tracing. If torch's private ``_cache_key`` is not the
method this was written against (another torch), the class is plain FakeTensorMode.
Exactness is tested, not assumed: tests/profiler/measure/test_quickfake.py compares every
prediction made through this mode with plain FakeTensorMode runs, and shows that a
quick key missing one field (storage bytes) is caught.
"""

from __future__ import annotations

import inspect
import threading

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

try:  # torch's own context for running a meta kernel on fake tensors (native_view)
    from torch._subclasses.fake_tensor import in_kernel_invocation_manager
except ImportError:  # another torch: no native views
    in_kernel_invocation_manager = None

_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_EXPECTED = ["self", "state", "func", "args", "kwargs"]


class _NoQuickKey(Exception):
    pass


class CpuFakeTensorMode(FakeTensorMode):
    """FakeTensorMode for attnprof's fakes, which all live on the CPU device: it never asks
    whether CUDA is there.

    torch's ``avoid_device_init`` property calls ``torch.cuda.is_available()`` on entering
    the mode and on every op it dispatches. On a CUDA build that is
    ``torch._C._cuda_getDeviceCount()``, which poisons fork (torch/csrc/cuda/Module.cpp):
    every worker forked afterwards fails at its first CUDA tensor. True here is the answer
    torch gives on a machine without a GPU, the right one for CPU fakes (no constant on a
    CPU fake is ever moved to a device). tests/profiler/test_no_cuda_before_fork.py.
    Build one with ``internals.new_fake_mode``, never directly.

    Nor does entering it start the CUDA driver. With ``avoid_device_init`` true, torch's
    ``__enter__`` calls ``torch._C._ensureCUDADeviceGuardSet()`` (c10/core/impl/
    DeviceGuardImplInterface.cpp ``ensureCUDADeviceGuardSet``: the CUDA guard's ``deviceCount()``,
    so ``c10::cuda::device_count()`` and ``cudaGetDeviceCount``, which calls ``cuInit``) to put a
    no-op guard in place for fake CUDA tensors where there is no GPU. That C++ call is what
    started the driver in the sweep's warm helper on the first real GPU, after which every
    forked worker failed (../shared/gpu-runs/h200-2026-12-04/call2-fork-diag.txt; found with a
    stand-in driver that records its callers, tests/profiler/test_no_driver_before_fork.py).
    attnprof's fakes are all CPU tensors and need no CUDA guard, so the call is skipped while
    this mode enters, on every build alike.

    So it refuses, as a Python error, an op asked to make a tensor on any device but the CPU
    (or ``meta``): a variant that hard-codes ``device="cuda"`` is traced on the CPU, where torch
    would make the fake, then abort the whole process (C++ ``std::terminate``, no Python error)
    the first time autograd records it (``InputMetadata`` asks the device's guard: "not linked
    with support for cuda devices" on a CPU build, no device on a CUDA one)."""

    def dispatch(self, func, types, args=(), kwargs=None):
        device = kwargs.get("device") if kwargs else None
        if device is not None and torch.device(device).type not in _TRACED_DEVICES:
            raise RuntimeError(f"attnprof traces on the CPU, but {func} was asked for a tensor on {device}: "
                               "make tensors on the inputs' device (x.device), not a named one")
        return super().dispatch(func, types, args, kwargs)

    @property
    def avoid_device_init(self) -> bool:
        return True

    @avoid_device_init.setter
    def avoid_device_init(self, value) -> None:  # an older torch assigns it in __init__
        pass

    def __enter__(self):
        with _GUARD_SWAP:  # one swap at a time: two threads would each put back the other's stand-in
            probe = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)
            if probe is None or probe is _no_device_guard:  # a torch without it, or a nested enter
                return super().__enter__()
            try:
                torch._C._ensureCUDADeviceGuardSet = _no_device_guard  # torch's __enter__ looks it up per call
                return super().__enter__()
            finally:
                torch._C._ensureCUDADeviceGuardSet = probe


_GUARD_SWAP = threading.RLock()
_TRACED_DEVICES = ("cpu", "meta")


def _no_device_guard() -> None:
    """Stands for ``torch._C._ensureCUDADeviceGuardSet`` while a CpuFakeTensorMode enters."""


_UNSAFE_VIEW = torch.ops.aten._unsafe_view.default
_VIEW = torch.ops.aten.view.default
_EXPECTED_DISPATCH = ["self", "func", "types", "args", "kwargs"]


def torch_key_supported() -> bool:
    """Whether this torch's private ``FakeTensorMode._cache_key`` is the method the quick key
    memoises (its signature; the behaviour is checked by ``internals.check``)."""
    method = getattr(FakeTensorMode, "_cache_key", None)
    try:
        return method is not None and list(inspect.signature(method).parameters) == _EXPECTED
    except (TypeError, ValueError):
        return False


def torch_dispatch_supported() -> bool:
    """Whether this torch's private ``FakeTensorMode._cached_dispatch_impl`` is the method
    QuickFakeTensorMode answers ``_unsafe_view`` in front of (its signature)."""
    method = getattr(FakeTensorMode, "_cached_dispatch_impl", None)
    try:
        return method is not None and list(inspect.signature(method).parameters) == _EXPECTED_DISPATCH
    except (TypeError, ValueError):
        return False


class QuickFakeTensorMode(CpuFakeTensorMode):
    """FakeTensorMode with a memoised dispatch-cache key (see the module docstring)."""

    enabled = torch_key_supported()
    # quick key -> torch's key, shared by every instance as torch shares its cache
    # (FakeTensorMode.cache): neither key names the mode, only that the tensors are its own
    _quick_keys: dict = {}
    quick_hits = 0
    quick_unsafe_views = torch_dispatch_supported()  # _cached_dispatch_impl answers _unsafe_view itself

    @classmethod
    def memo_size(cls) -> int:
        """How many quick keys the memo holds (shared by every instance)."""
        return len(QuickFakeTensorMode._quick_keys)

    @classmethod
    def swap_memo(cls, memo: dict) -> dict:
        """Make ``memo`` the memo of every instance; -> the one it replaces (to put back)."""
        old, QuickFakeTensorMode._quick_keys = QuickFakeTensorMode._quick_keys, memo
        return old

    def _cache_key(self, state, func, args, kwargs):
        if not self.enabled or self.shape_env is not None:
            return super()._cache_key(state, func, args, kwargs)
        try:
            quick = self._quick_key(func, args, kwargs)
        except _NoQuickKey:
            return super()._cache_key(state, func, args, kwargs)
        key = QuickFakeTensorMode._quick_keys.get(quick)
        if key is None:
            key = super()._cache_key(state, func, args, kwargs)  # raises where torch would bypass
            QuickFakeTensorMode._quick_keys[quick] = key
        else:
            QuickFakeTensorMode.quick_hits += 1
        return key

    def _cached_dispatch_impl(self, func, types, args, kwargs):
        if self.enabled and self.shape_env is None and not self.propagate_real_tensors and func in native_views(self):
            out = native_view(self, func, args, kwargs)  # the view ops: their own meta kernel, as torch runs it
            if out is not None:
                return out
        # _unsafe_view (matmul's and the autograd formulas' reshape): torch's cache never keeps
        # it (the "unsafe view" bypass), so every one pays torch's key, the bypass and
        # _dispatch_impl's preamble before reaching a view. Its answer is quick_view's, asked
        # straight away; anything quick_view does not vouch for takes torch's path.
        if func is _UNSAFE_VIEW and self.quick_unsafe_views and not kwargs and len(args) == 2:
            a = args[0]  # quick_view checks the rest: enabled, no shape environment, a plain fake, its sizes
            if (getattr(a, "fake_mode", None) is self and a.constant is None and not self.propagate_real_tensors
                    and torch.fx.experimental.proxy_tensor.get_proxy_mode() is None):
                out = quick_view(self, a, args[1:])
                if out is not None:
                    return out
        return super()._cached_dispatch_impl(func, types, args, kwargs)

    def _quick_key(self, func, args, kwargs) -> tuple:
        if torch.fx.experimental.proxy_tensor.get_proxy_mode() is not None:
            raise _NoQuickKey
        out = [func, torch.get_default_dtype(), torch._C._get_default_device(), torch.is_inference_mode_enabled()]
        self.flatten(out, args)
        self.flatten(out, kwargs)
        return tuple(out)

    def flatten(self, out: list, value) -> None:
        """Append ``value``'s part of the quick key to ``out`` (recursing into lists, tuples
        and dicts); ``_NoQuickKey`` where only torch's own key will do."""
        kind = type(value)
        if kind is FakeTensor:
            if value.fake_mode is not self or value.constant is not None:
                raise _NoQuickKey
            out.extend((value.dtype, value.shape, value.stride(), value.storage_offset(),
                        value.untyped_storage().nbytes(), value.requires_grad, value.is_conj(), value.is_neg(),
                        value.is_inference(), value.layout, value.fake_device))
        elif kind in (list, tuple):
            out.append((kind, len(value)))
            for item in value:
                self.flatten(out, item)
        elif kind is dict:
            out.append((dict, len(value)))
            for name, item in value.items():
                out.append(name)
                self.flatten(out, item)
        elif kind in _SCALARS:
            out.append(kind)
            out.append(value)
        else:  # a real tensor, a SymInt, a function, anything else: torch's own key
            raise _NoQuickKey


# --- views, natively (see the module docstring) ------------------------------------------
def _plain_ints(values) -> bool:
    return all(type(v) is int for v in values)


def _install_quick_view() -> None:
    """Route aten.view / aten._unsafe_view of QuickFakeTensorMode through ``quick_view``;
    every other FakeTensorMode keeps torch's implementation."""
    from torch._subclasses import fake_impls

    table = getattr(fake_impls, "op_implementations_dict", None)
    ops = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    if not isinstance(table, dict) or not all(op in table for op in ops):
        return  # another torch: its own path everywhere
    for op in ops:
        torch_impl = table[op]
        if getattr(torch_impl, "_attnprof_quick", False):
            continue

        def impl(fake_mode, func, a, *shape, _torch_impl=torch_impl, **kwargs):
            if isinstance(fake_mode, QuickFakeTensorMode) and not kwargs:
                out = quick_view(fake_mode, a, shape)
                if out is not None:
                    return out
            return _torch_impl(fake_mode, func, a, *shape, **kwargs)

        impl._attnprof_quick = True
        impl.torch_impl = torch_impl
        table[op] = impl


def quick_view(fake_mode, a, shape):
    """``a.view(shape)`` for a fake ``a``, its layout from ATen's meta view; None where
    torch's own path must answer (see the module docstring)."""
    if not fake_mode.enabled or fake_mode.shape_env is not None or type(a) is not FakeTensor:
        return None
    size = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)) else shape
    if not (_plain_ints(size) and _plain_ints(a.shape) and _plain_ints(a.stride())
            and type(a.storage_offset()) is int) or a.dim() == 0 or a.numel() == 0:
        return None
    try:
        stand_in = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
        viewed = stand_in.view(size)  # ATen: infers -1, checks, computes the strides
    except RuntimeError:
        return None  # not viewable (or a bad size): torch's path raises its own error
    return torch.ops.aten.as_strided.default(a, viewed.shape, viewed.stride(), a.storage_offset())


# --- view ops, natively (see the module docstring) ------------------------------------------
# Aliasing view ops with one output (detach, t, transpose, view, ...: over a third of a trace's ops,
# ~50 us each through torch's cache). Which of them qualify is decided from torch itself, once.
VIEW_CANDIDATES = ("t.default", "transpose.int", "detach.default", "expand.default", "permute.default",
                    "unsqueeze.default", "alias.default", "as_strided.default", "view.default")
_NATIVE: dict = {}  # "ops" -> the frozenset, once computed


def forget_native_views() -> None:
    """Compute ``native_views`` afresh at the next call (after VIEW_CANDIDATES changed)."""
    _NATIVE.clear()


def native_views(mode) -> frozenset:
    """The candidate view ops whose fake output torch itself computes, for static sizes, by
    running the op's meta kernel in kernel invocation (the last leg of
    ``FakeTensorMode._dispatch_impl``): no Python decomposition it would prefer, no
    CompositeImplicitAutograd decomposition, no prim, no registered fake kernel, no special
    fake implementation, a meta kernel. ``view`` has a special one (``_view_meta``), whose
    layout ``quick_view`` already stands in for with ATen's meta view: it qualifies too."""
    found = _NATIVE.get("ops")
    if found is None:
        try:
            found = _qualifying(mode)
        except (AttributeError, ImportError, TypeError, RuntimeError):  # another torch's internals: none
            found = frozenset()
        _NATIVE["ops"] = found
    return found


def _qualifying(mode) -> frozenset:
    """``native_views``' answer, read from this torch (see there)."""
    if in_kernel_invocation_manager is None:
        return frozenset()
    from torch._decomp import decomposition_table, meta_table
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import torch_decomp_decompositions

    def qualifies(op) -> bool:
        special = any(check(op) for check, _ in fake_impls.op_implementations_checks)
        prefers_python = (op not in meta_table and not FakeTensorMode.cpp_meta_supports_symint(mode, op)
                          and op in decomposition_table and torch_decomp_decompositions(op))
        return (op.is_view and len(op._schema.returns) == 1 and not prefers_python
                and not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
                and "prims::" not in op._schema.name and fake_impls.has_meta(op)
                and torch._library.simple_registry.singleton.find(op.name()).fake_impl.kernel is None
                and (not special or op is torch.ops.aten.view.default))

    ops = []
    for name in VIEW_CANDIDATES:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None and qualifies(op):
            ops.append(op)
    return frozenset(ops)


def native_view(fake_mode, func, args, kwargs):
    """``func`` (one of ``native_views``) on a plain fake tensor of this mode and static
    sizes: its meta kernel run in kernel invocation, the output wrapped on the input's
    device, as torch's own path makes it; None where torch's path must answer (a constant,
    a symbolic or tensor argument, proxy tracing)."""
    a = args[0] if args else None
    if type(a) is not FakeTensor or a.fake_mode is not fake_mode or a.constant is not None:
        return None
    for value in (*args[1:], *kwargs.values()):
        kind = type(value)
        if kind in (list, tuple):
            if not _plain_ints(value):
                return None
        elif kind not in (int, bool, type(None)):
            return None
    if func is _VIEW and (a.dim() == 0 or a.numel() == 0):
        return None  # quick_view's exclusions: torch's _view_meta answers these
    if torch.fx.experimental.proxy_tensor.get_proxy_mode() is not None:
        return None
    try:
        with in_kernel_invocation_manager(fake_mode):
            out = func(*args, **kwargs)
    except RuntimeError:
        return None  # e.g. not viewable: torch's path raises its own error
    return FakeTensor(fake_mode, out, a.fake_device)


if QuickFakeTensorMode.enabled:
    _install_quick_view()

