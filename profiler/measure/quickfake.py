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

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_EXPECTED = ["self", "state", "func", "args", "kwargs"]


class _NoQuickKey(Exception):
    pass


def _supported() -> bool:
    method = getattr(FakeTensorMode, "_cache_key", None)
    try:
        return method is not None and list(inspect.signature(method).parameters) == _EXPECTED
    except (TypeError, ValueError):
        return False


class QuickFakeTensorMode(FakeTensorMode):
    """FakeTensorMode with a memoised dispatch-cache key (see the module docstring)."""

    enabled = _supported()
    # quick key -> torch's key, shared by every instance as torch shares its cache
    # (FakeTensorMode.cache): neither key names the mode, only that the tensors are its own
    _quick_keys: dict = {}
    quick_hits = 0

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

    def _quick_key(self, func, args, kwargs) -> tuple:
        if torch.fx.experimental.proxy_tensor.get_proxy_mode() is not None:
            raise _NoQuickKey
        out = [func, torch.get_default_dtype(), torch._C._get_default_device(), torch.is_inference_mode_enabled()]
        self._flatten(out, args)
        self._flatten(out, kwargs)
        return tuple(out)

    def _flatten(self, out: list, value) -> None:
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
                self._flatten(out, item)
        elif kind is dict:
            out.append((dict, len(value)))
            for name, item in value.items():
                out.append(name)
                self._flatten(out, item)
        elif kind in _SCALARS:
            out.append(kind)
            out.append(value)
        else:  # a real tensor, a SymInt, a function, anything else: torch's own key
            raise _NoQuickKey
