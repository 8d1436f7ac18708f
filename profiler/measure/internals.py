"""Whether this torch's private fake-tensor internals still behave as the fast path assumes.

The fast prediction path leans on three things torch does not promise to keep:
``FakeTensorMode._cache_key`` (``quickfake.QuickFakeTensorMode`` memoises it), the fake
``view`` implementations in ``fake_impls.op_implementations_dict`` (``quick_view``
replaces them) and the layout of ``torch._dynamo.config`` (``fakemode.light_dynamo``,
which falls back to the real package by itself). attnprof is tested on torch 2.11 (the
lent GPU machine's) and 2.13 (this project's CPU machines); any other torch may differ.

So once per process, before the first quick fake mode is handed out, ``trusted`` traces
one tiny point twice, through the fast path and through torch's own (``CpuFakeTensorMode``:
no memoised key, torch's views), and compares everything a prediction is made of: the
event sequence, peak, breakdown, largest storages and FLOPs. Where anything differs, or
the internals are missing, the fast path steps aside for the rest of the process with one
line on stderr saying so: a prediction is then slower, never wrong. The check costs two
tiny traces (~0.1 s, after the fake-tensor imports every fake prediction pays anyway).

A layer above may remember a passed check across processes (``remember_with``: the
prediction layer keeps it in its cache folder, profiler/predict/trust_memo.py, keyed by this
torch's build and attnprof's source): a process that recalls it skips the two traces and
the plain mode's slow paths (measured: ~0.7 s of a cold prediction's first point).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Optional

from attnprof.profiler.safe_points import deferring

_verdict: Optional[bool] = None
_problem = ""
# (recall, remember) from a layer above (see the module docstring): ``recall()`` -> whether this
# torch and source passed the check before; ``remember()`` when it passes here. None: always check.
_memory: Optional[tuple] = None


def remember_with(recall: Callable[[], bool], remember: Callable[[], None]) -> None:
    """Let ``trusted`` recall a verdict from before, and tell ``remember`` of a passed check."""
    global _memory
    _memory = (recall, remember)


def new_fake_mode(*, quick: bool = True):
    """The one constructor of every fake-tensor mode attnprof builds: CPU fakes that never
    probe CUDA (``quickfake.CpuFakeTensorMode``); ``quick`` for the memoised key and native
    views, where this torch passed ``check`` (otherwise torch's own path: slower, the same
    figures)."""
    from attnprof.profiler.measure.quickfake import CpuFakeTensorMode, QuickFakeTensorMode

    if quick and QuickFakeTensorMode.enabled and trusted():
        return QuickFakeTensorMode()
    return CpuFakeTensorMode()


def trusted() -> bool:
    """Whether the quick fake mode may be used in this process (checked once, see above)."""
    global _verdict, _problem
    if _verdict is None:
        _verdict = True  # the check's own quick run asks too
        if _memory is not None and _recalled(_memory[0]):
            return True
        try:
            _problem = check()
        except Exception as exc:  # noqa: BLE001 - an internal that raises is one that differs
            _problem = f"the check itself failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        if _problem:
            distrust(_problem)
        elif _memory is not None:
            with contextlib.suppress(Exception):  # a verdict not kept costs the next process a check
                _memory[1]()
    return _verdict


def _recalled(recall: Callable[[], bool]) -> bool:
    try:
        return recall() is True
    except Exception:  # noqa: BLE001 - a memory that fails is one that does not recall
        return False


def distrust(problem: str) -> None:
    """Turn the fast path off for this process and say so in one line."""
    global _verdict, _problem
    from attnprof.profiler.measure.quickfake import QuickFakeTensorMode

    import torch

    _verdict, _problem = False, problem
    QuickFakeTensorMode.enabled = False
    print(f"attnprof: torch {torch.__version__}'s fake-tensor internals differ from what the fast prediction "
          f"path was written for ({problem}); predicting through torch's own path instead (slower, same figures)",
          file=sys.stderr, flush=True)


def problem() -> str:
    """Why the fast path stepped aside in this process ("" when it did not)."""
    return _problem


def check() -> str:
    """"" when a tiny trace records the same events under the quick and the plain fake mode
    (and the memo was used), else why not."""
    from attnprof.profiler.measure.quickfake import CpuFakeTensorMode, QuickFakeTensorMode

    if not QuickFakeTensorMode.enabled:
        return "FakeTensorMode._cache_key is not the method the quick key memoises"
    plain = _fresh(tiny_trace, CpuFakeTensorMode)  # first: torch computes every op itself
    hits_before = QuickFakeTensorMode.quick_hits
    quick = _fresh(tiny_trace, QuickFakeTensorMode)
    if QuickFakeTensorMode.quick_hits == hits_before:
        return "the memoised dispatch key was never used"
    if quick != plain:
        return "a tiny trace records different tensors under the quick and the plain fake mode"
    return ""


def _fresh(fn, *args):
    """``fn(*args)`` with torch's fake dispatch cache and the quick-key memo empty, then
    put back: neither run may read a layout the other one computed (both are shared by
    every mode of the process)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from attnprof.profiler.measure.quickfake import QuickFakeTensorMode

    torch_cache = FakeTensorMode.__dict__.get("cache")
    if isinstance(torch_cache, dict):
        FakeTensorMode.cache = {}
    memo = QuickFakeTensorMode.swap_memo({})
    try:
        return fn(*args)
    finally:
        QuickFakeTensorMode.swap_memo(memo)
        if isinstance(torch_cache, dict):
            FakeTensorMode.cache = torch_cache


@deferring  # Ctrl-C and SIGTERM wait for a safe point (profiler/safe_points.py)
def tiny_trace(mode_cls) -> tuple:
    """The tracker's events and every output's layout for a few ops of each kind the fast
    path touches: views of contiguous, offset, transposed and expanded tensors (quick view,
    native views), repeated ops (the memoised key, hit on the second layer; one shape in two
    layouts), matmuls, softmax, backward
    (forward only in a CUDA-build process that may still fork: see the code)."""
    import torch

    from attnprof.profiler.measure.fakemode import light_dynamo
    from attnprof.profiler.measure.tracker import MemoryTracker

    from attnprof.profiler.forks import autograd_fork_safe, cuda_compiled

    # On a CUDA build a backward would start autograd's device threads, after which this
    # process could fork no worker that runs one (profiler/forks.py): check forward ops then.
    backward = not (cuda_compiled() and autograd_fork_safe())
    layouts = []

    def keep(t):
        layouts.append((tuple(t.shape), t.stride(), t.storage_offset(), t.untyped_storage().nbytes(), t.dtype))
        return t

    with light_dynamo(), mode_cls(), MemoryTracker(trace=True) as tracker:
        x = torch.empty(2, 8, 16, dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(16, 16, dtype=torch.bfloat16, requires_grad=True)
        h = x
        for _ in range(2):  # the second layer repeats every op: memo hits
            q = keep(keep(h @ w).view(2, 8, 2, 8)).transpose(1, 2)  # (B, H, n, d)
            s = keep(torch.softmax(keep(q @ q.transpose(-1, -2)), dim=-1))
            h = keep(keep(keep(s @ q).transpose(1, 2).contiguous()).view(2, 8, 16))
        keep(h[:, 2:5].view(2, -1))  # a view at an offset
        keep(h[:, :1].expand(2, 8, 16).reshape(16, 16))  # stride 0
        keep(x.transpose(0, 1).reshape(8, 2, 2, 8))  # a copy: not viewable
        keep(w.clone()), keep(w.t().clone())  # one shape, two layouts: the memo must tell them apart
        if backward:
            h.sum().backward()
            keep(x.grad)
        events = list(tracker.trace)
    return events, layouts, tracker.peak_bytes


def reset_for_tests() -> None:
    """Forget the verdict (and turn the quick mode back on if this torch supports it)."""
    global _verdict, _problem
    from attnprof.profiler.measure.quickfake import QuickFakeTensorMode, torch_key_supported

    _verdict, _problem = None, ""
    QuickFakeTensorMode.enabled = torch_key_supported()
