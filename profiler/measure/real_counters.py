"""A for-loop optimizer's step counters as real tensors in a fake run (issue 24: speed).

Under FakeTensorMode a 0-dim tensor made by ``torch.tensor`` carries its value (its
``constant``), so ``.item()`` can answer. torch's for-loop AdamW (``_single_tensor_adam``,
the CPU default) does ``step_t += 1`` and ``step_t.item()`` on every parameter's ``step``.
FakeTensorMode caches neither: an op on a constant runs on the constant through its slow
path, and converts the wrapped number ``1`` to a fake tensor each time. Measured
(torch 2.13, this machine): 1.3 ms per parameter for the ``add_``, 0.1 ms for the
``.item()``, and 0.3 ms for each counter's ``torch.tensor`` in ``optimizer.prime``: most of
what the step added to a prediction.

So a fake run's for-loop optimizer keeps its counters as real CPU tensors, which is what
torch itself makes for a step that is neither fused nor capturable: a 0-dim float32 tensor,
4 bytes, on the CPU. ``real_counter`` makes one (outside the fake mode), and the tracker
runs an op whose first argument is one of them for real, the fake mode set aside
(``run``): the same bytes, the same trace events, the same value read back
(tests/profiler/measure/test_real_counters.py compares traced runs with and without).

Not for a foreach or fused step: those pass the counters to one op together with fake
tensors (``_foreach_add_`` with a fake ``1``; the fused kernel), which FakeTensorMode
would refuse as mixed inputs; nor for a capturable or differentiable one (``beta1 ** step``).
Only the tracker runs a counter's op for real: a fake workload stepped outside a tracker
would fail on ``.item()`` (every fake run steps inside one: measure/drive.py's step pass).
``ENABLED`` turns the whole thing off (the tests' reference).
"""

from __future__ import annotations

import weakref

import torch

ENABLED = True
_REAL: dict = {}  # id(tensor) -> weak reference to it: the real counters alive


def real_counter(value, dtype: torch.dtype) -> torch.Tensor:
    """A real 0-dim CPU tensor holding ``value``, made outside any fake mode."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        t = torch.tensor(value, dtype=dtype, device="cpu")
    key = id(t)
    _REAL[key] = weakref.ref(t, lambda _, key=key: _REAL.pop(key, None))
    return t


def is_real_counter(t) -> bool:
    """Whether ``t`` is a counter ``real_counter`` made (and not another tensor at its id)."""
    ref = _REAL.get(id(t))
    return ref is not None and ref() is t


def run(func, args, kwargs):
    """``func`` on a real counter, for real: the fake mode (if any) set aside."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return func(*args, **kwargs)
