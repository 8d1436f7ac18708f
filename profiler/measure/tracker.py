"""Exact accounting of live tensor bytes, on real tensors and under FakeTensorMode.

A TorchDispatchMode sees every op's outputs. Each distinct storage is counted once
(views and in-place ops share storage and add nothing) and subtracted when the storage
is freed (``weakref.finalize``). The result is deterministic, which is what a CI gate
needs. It does not see memory a kernel allocates internally (fused-attention
workspaces), nor allocator rounding or caching: see docs/accounting.md.

Under fake tensors, enter this mode *inside* the FakeTensorMode (../shared/NOTES.md).

``MemoryTracker(trace=True)`` also keeps the exact ordered event sequence (``trace``):
every storage allocated (bytes, creating op) and freed, every op dispatched, and markers
(``mark("backward")``). The GPU memory model (``attnprof.profiler.memmodel``) replays it
through a simulation of the CUDA caching allocator. Off by default; when off it costs
one ``is None`` test per op and per storage.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnprof.profiler import safe_points
from attnprof.profiler.measure.real_counters import is_real_counter, run as run_real

# Ops that never allocate; under fake tensors prim.device alone is ~70% of all dispatches.
_NO_ALLOCATION = frozenset({torch.ops.prim.device.default})


@functools.lru_cache(maxsize=None)
def _unwinds(func) -> bool:
    """Whether a pending Ctrl-C may be raised in ``func``'s dispatch: an op that returns tensors.
    A query of a tensor's metadata (prim.device, sym_size, is_contiguous: no Tensor returned) is
    called from C++ that cannot unwind, and a KeyboardInterrupt there aborted the process
    (std::terminate, "python_error": 7 of 60 SIGTERMs of a budget search on the CUDA build)."""
    return any(str(r.type).startswith("Tensor") for r in func._schema.returns)


CATEGORIES = ("parameters", "gradients", "inputs", "activations", "temporaries")
# --- issue 24: precision ---
# A parameter's copy in another dtype (``_to_copy`` of a parameter's storage): under torch.autocast,
# the low-precision weights it casts (and caches until the region exits), apart from the fp32 parameters.
CATEGORIES += ("autocast_copies",)
_TO_COPY = torch.ops.aten._to_copy.default
# --- issue 24: optimizer ---
# An optimizer's states (registered with track) and what its step allocates (``new_kind``).
# A breakdown lists these and the autocast copies only where they hold bytes at the peak
# (``breakdown_of``), so a point without them keeps today's five keys.
OPTIMIZER_CATEGORIES = ("optimizer_state", "optimizer_temporaries")
CATEGORIES = CATEGORIES + OPTIMIZER_CATEGORIES
BASE_CATEGORIES = CATEGORIES[:5]
# --- issue 24: peak split ---
# What the LM head and the loss allocate (``scope_kind``: set over the head + loss forward, and over
# backward from its start until the final norm's output has its gradient, the chunked recompute of
# --loss-chunks included; profiler/measure/workload.py). Precedence: a category a storage is given
# outright (parameters, inputs, gradients, autocast copies, optimizer states: ``_kind``) wins over the
# scope's, and the scope's over "activations" (the head's saved-for-backward tensors stay lm_head_loss).
LM_HEAD_LOSS = "lm_head_loss"
CATEGORIES = CATEGORIES + (LM_HEAD_LOSS,)


def breakdown_of(by: dict) -> dict:
    """A breakdown at the peak from bytes per category: the five base categories always,
    the autocast copies and the optimizer's where non-zero."""
    return {c: by.get(c, 0) for c in CATEGORIES if c in BASE_CATEGORIES or by.get(c, 0)}

# Trace events (tuples, cheap to make; ``MemoryTracker.trace``), in the order they happened:
ALLOC = "alloc"  # (ALLOC, serial, nbytes, op): a new storage; op "" for one registered with track()
FREE = "free"  # (FREE, serial): its storage was freed
OP = "op"  # (OP, op, info): an op was dispatched; its new output storages' ALLOC events follow at once
MARK = "mark"  # (MARK, label): a point the caller named, e.g. "backward"
# Ops whose tensor arguments the trace describes in OP's info (the GPU model substitutes
# the CUDA kernels of these: SDPA, the ops profiler/memmodel/cuda_ops.py rewrites, and addmm,
# whose cuBLASLt path profiler/memmodel/blas_workspaces.py reads):
# {"grad_enabled": bool, "args": [TensorInfo | None, ...] (the positional arguments, then the keyword ones'
# values), "scalars": [each positional argument that is not a tensor, as plain data, else None],
# "kwargs": {name: plain data} (the keyword arguments that are not tensors)}. addmm: memmodel/
# blas_workspaces.py; sum, mean: memmodel/cuda_reduce.py.
TRACE_DETAIL_OPS = ("scaled_dot_product", "native_layer_norm", "_softmax_backward_data", "addmm", "sum", "mean",
                    "_fused_rms_norm", "native_dropout")  # norm backwards: memmodel/cuda_norm_backward.py


_DETAILED: dict = {}


def _detailed(name: str) -> bool:
    """Whether the trace describes this op's tensor arguments (TRACE_DETAIL_OPS), memoised."""
    found = _DETAILED.get(name)
    if found is None:
        found = _DETAILED[name] = any(part in name for part in TRACE_DETAIL_OPS)
    return found


def _plain_arg(a):
    """A traced op's non-tensor argument as plain data (ints, floats, bools, None, tuples of
    them, a dtype's name), or None for anything else."""
    if a is None or isinstance(a, (bool, int, float)):
        return a
    if isinstance(a, (list, tuple)) and all(isinstance(x, (bool, int, float)) for x in a):
        return tuple(a)
    if isinstance(a, torch.dtype):
        return _dtype_name(a)
    return None


@dataclass(frozen=True)
class TensorInfo:
    """A tensor argument of a traced op, as the GPU model needs it."""

    serial: Optional[int]  # the storage's serial, None if the tracker never saw it
    shape: tuple
    stride: tuple
    dtype: str  # "float32", ...
    requires_grad: bool


@dataclass
class MemoryReport:
    """The peak of live tensor bytes and, at that moment, what they were."""

    peak_bytes: int
    end_bytes: int  # live at exit
    breakdown_bytes: dict = field(default_factory=dict)  # category -> bytes at the peak
    largest_at_peak: list = field(default_factory=list)  # [{op, shape, dtype, category, bytes}], biggest first
    peak_op: str = ""  # issue 24: the op whose output reached the peak ("" if none: registered tensors)
    peak_pass: str = ""  # issue 24: the pass it ran in: "forward" | "backward" | "step" ("" unknown)

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "end_bytes": self.end_bytes,
                "breakdown_bytes": dict(self.breakdown_bytes), "largest_at_peak": list(self.largest_at_peak)}


_DTYPE_NAMES: dict = {}


def _dtype_name(dtype: torch.dtype) -> str:
    """"float32" for torch.float32 (memoised: a fake run asks for every new storage)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def tensors_in(value) -> list:
    """The tensors in an op's arguments or outputs, in order: what ``tree_flatten`` finds
    in the lists, tuples (return types included) and dicts ops take and return, without
    its generic walk (a fake run calls this for every op)."""
    if isinstance(value, torch.Tensor):
        return [value]
    out: list = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return out


class MemoryTracker(TorchDispatchMode):
    """Peak and current live bytes of distinct tensor storages.

    Categories at the peak: ``parameters`` and ``inputs`` (registered with ``track``),
    ``gradients`` (storages that end up as a ``.grad``; call ``mark_gradients``),
    ``activations`` (saved for backward; seen through saved-tensor hooks) and
    ``temporaries`` (everything else); under autocast (issue 24) ``autocast_copies`` (a
    parameter cast to another dtype, saved or not: what torch.autocast casts and caches);
    with an optimizer (issue 24) ``optimizer_state``
    (registered with ``track``) and ``optimizer_temporaries`` (allocated while ``new_kind``
    names it: the step); with a vocabulary (issue 24) ``lm_head_loss`` (allocated while
    ``scope_kind`` names it: the LM head and loss, see LM_HEAD_LOSS).
    """

    def __init__(self, trace: bool = False):
        super().__init__()
        # Storage addresses are reused after a free, so each storage also gets a serial
        # number that is never reused; categories are kept by serial.
        self._live: dict[int, tuple[int, int]] = {}  # storage address -> (serial, nbytes)
        self._serial = 0
        self._kind: dict[int, str] = {}  # serial -> category, where known
        self._origin: dict[int, tuple] = {}  # serial -> (op, shape, dtype) that created it
        self._saved: set[int] = set()  # serials saved for backward
        self.current_bytes = 0
        self.peak_bytes = 0
        self._peak: list[tuple[int, int]] = []  # (serial, nbytes) live at the peak
        self._at_peak = False  # the live set is the peak's, not yet copied
        self._hooks = None
        self._watch: dict[int, weakref.ref] = {}  # serial -> a weak reference to its live storage
        self.trace: Optional[list] = [] if trace else None  # the event sequence, when asked for
        self.new_kind: Optional[str] = None  # the category of every storage allocated while set (issue 24)
        # --- issue 24: peak split --- a weaker category while set (LM_HEAD_LOSS), and the op and pass
        # (``phase``, set by drive) that made the storage reaching the peak ("" when none did: registered)
        self.scope_kind: Optional[str] = None
        self._scoped: dict[int, str] = {}  # serial -> scope_kind when it was allocated
        self.phase = ""
        self.peak_op = ""
        self.peak_pass = ""

    # --- storage bookkeeping ---------------------------------------------------------
    def _serial_of(self, t: torch.Tensor) -> int:
        self._add(t)
        return self._live[t.untyped_storage()._cdata][0]

    def _add(self, t: torch.Tensor, op: str = "") -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._live:
            return
        nbytes = storage.nbytes()
        self._serial += 1
        serial = self._serial
        self._origin[serial] = (op, tuple(t.shape), _dtype_name(t.dtype))
        if self.new_kind is not None and op:
            self._kind[serial] = self.new_kind
        if self.scope_kind is not None and op:
            self._scoped[serial] = self.scope_kind
        self._live[key] = (serial, nbytes)
        if self.trace is not None:
            self.trace.append((ALLOC, serial, nbytes, op))
        self.current_bytes += nbytes
        # A weak reference whose callback runs when the storage is freed (as weakref.finalize
        # would, at a tenth of the cost: no global registry, nothing left to run at exit).
        # The tracker keeps the reference alive until then; a tracker that is gone hears no more.
        self._watch[serial] = weakref.ref(storage, lambda _, key=key, serial=serial: self._free(key, serial))
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes = self.current_bytes
            self._at_peak = True
            self.peak_op, self.peak_pass = op, self.phase if op else ""

    def _snapshot_if_at_peak(self) -> None:
        """Between a new peak and the next free only allocations happen, and each of them
        is a new peak; so the live set at the first free after a peak *is* the live set
        at the peak. Copying it then, not at every allocation, avoids quadratic cost."""
        if self._at_peak:
            self._peak = list(self._live.values())
            self._at_peak = False

    def _free(self, key: int, serial: int) -> None:
        self._watch.pop(serial, None)
        entry = self._live.get(key)
        if entry is not None and entry[0] == serial:
            self._snapshot_if_at_peak()
            del self._live[key]
            self.current_bytes -= entry[1]
            if self.trace is not None:
                self.trace.append((FREE, serial))

    def track(self, tensors, kind: str) -> None:
        """Count tensors that already exist (parameters, inputs) as live, with a category."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._kind.setdefault(self._serial_of(t), kind)

    def mark_gradients(self, tensors) -> None:
        """Name storages that are gradients (call after backward, before reading)."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._kind.setdefault(self._serial_of(t), "gradients")

    def mark(self, label: str) -> None:
        """Put a named marker into the trace (no-op without ``trace``)."""
        if self.trace is not None:
            self.trace.append((MARK, label))

    def _op_info(self, name: str, args, kwargs) -> Optional[dict]:
        if not _detailed(name):
            return None
        kwargs = kwargs or {}
        described = []
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor):
                entry = self._live.get(a.untyped_storage()._cdata)
                shape = tuple(a.shape)
                # a size-1 dimension's stride addresses nothing: recorded as 1, so that one layout
                # traced twice (fake tensors may give such a stride either value) reads the same
                stride = tuple(1 if size == 1 else st for size, st in zip(shape, a.stride()))
                described.append(TensorInfo(entry[0] if entry else None, shape, stride,
                                            _dtype_name(a.dtype), bool(a.requires_grad)))
            else:
                described.append(None)
        scalars = [None if isinstance(a, torch.Tensor) else _plain_arg(a) for a in args]
        named = {k: _plain_arg(v) for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
        return {"grad_enabled": torch.is_grad_enabled(), "args": described, "scalars": scalars, "kwargs": named}

    def reset_peak(self) -> None:
        self.peak_bytes = self.current_bytes
        self._at_peak = True
        self.peak_op = self.peak_pass = ""

    # --- dispatch ----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.dispatch(func, args, kwargs)[0]

    def dispatch(self, func, args, kwargs) -> tuple:
        """Run the op and count its new storages: (its output, the output's tensors), the
        tensors None for an op that allocates nothing (then it leaves no OP event)."""
        if safe_points.PENDING and _unwinds(func):  # Ctrl-C or SIGTERM in a deferred run: raised as an op's error is
            safe_points.check()
        if args and type(args[0]) is torch.Tensor and is_real_counter(args[0]):  # issue 24: real_counters.py
            out = run_real(func, args, kwargs or {})
        else:
            out = func(*args, **(kwargs or {}))
        if func in _NO_ALLOCATION:
            return out, None
        name = func.__name__
        if self.trace is not None:
            self.trace.append((OP, name, self._op_info(name, args, kwargs)))
        outputs = tensors_in(out)
        for t in outputs:
            self._add(t, name)
        if func is _TO_COPY:  # issue 24: a parameter cast to another dtype is an autocast copy
            self._name_copy(args[0], outputs)
        return out, outputs

    def _name_copy(self, source: torch.Tensor, outputs: list) -> None:
        """Name ``outputs`` (of a ``_to_copy`` of ``source``) "autocast_copies" when ``source``
        is a parameter's storage and the copy changed its dtype (see CATEGORIES)."""
        entry = self._live.get(source.untyped_storage()._cdata)
        if entry is None or self._kind.get(entry[0]) != "parameters":
            return
        for t in outputs:
            if t.dtype != source.dtype:
                self._kind.setdefault(self._live[t.untyped_storage()._cdata][0], "autocast_copies")

    def __enter__(self):
        def pack(t):
            self._saved.add(self._serial_of(t))
            return t

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._hooks.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._hooks.__exit__(*exc)

    def live_serials(self, tensors) -> tuple:
        """The serials of those ``tensors`` whose storage is live (counted), in order."""
        live = self._live
        return tuple(entry[0] for t in tensors if (entry := live.get(t.untyped_storage()._cdata)) is not None)

    # --- results -----------------------------------------------------------------------
    def categories(self) -> dict:
        """serial -> category, of every storage counted so far."""
        return {serial: self._category(serial) for serial in self._origin}

    def origins(self) -> dict:
        """serial -> (op, shape, dtype) that created it, of every storage counted so far."""
        return dict(self._origin)

    def _category(self, serial: int) -> str:
        kind = self._kind.get(serial) or self._scoped.get(serial)
        if kind is None:
            kind = "activations" if serial in self._saved else "temporaries"
        return kind

    def breakdown_at_peak(self) -> dict:
        self._snapshot_if_at_peak()
        out: dict = {}
        for serial, nbytes in self._peak:
            category = self._category(serial)
            out[category] = out.get(category, 0) + nbytes
        return breakdown_of(out)

    def largest_at_peak(self, count: int = 5) -> list[dict]:
        """The biggest storages live at the peak: which op made them, and their shape."""
        self._snapshot_if_at_peak()
        biggest = sorted(self._peak, key=lambda e: e[1], reverse=True)[:count]
        out = []
        for serial, nbytes in biggest:
            op, shape, dtype = self._origin.get(serial, ("", (), ""))
            out.append({"op": op or "(existing)", "shape": list(shape), "dtype": dtype,
                        "category": self._category(serial), "bytes": nbytes})
        return out

    def report(self) -> MemoryReport:
        return MemoryReport(self.peak_bytes, self.current_bytes, self.breakdown_at_peak(), self.largest_at_peak(),
                            self.peak_op, self.peak_pass)
