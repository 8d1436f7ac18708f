"""Run one point under a tracer: what every accounting of a point runs (``drive``), and
the traced fake run that the composition (profiler/predict/compose.py) and the GPU
memory model's trace (profiler/memmodel/trace.py) read (``trace_point``).

``drive`` registers the parameters and inputs, runs forward, then backward, and names
the gradients: one function, so a real run, the full-depth fake run and a traced one
cannot drift apart. ``Tracer`` is the memory tracker with its ordered event trace on and
FLOPs (and bytes read/written) counted per op in the same dispatch mode.

The marks come from hooks that allocate nothing and hold no tensor: forward pre-hooks on
a period's first attention (``block.f``, which runs in the forward and again where
checkpoint or reversible recompute it) and last feed-forward (``block.g``: a reversible
backward rebuilds it first), and, in the forward, a gradient hook on a period's last
output (it fires where backward enters the period). The parameters are registered period
by period, in their usual order. The tracer counts FLOPs (flops.REGISTRY, as
``FlopCounter``) in the same dispatch mode, and FakeTensorMode runs under
``fakemode.light_dynamo`` (no torch._dynamo import).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from attnprof.profiler.measure.fakemode import light_dynamo
from attnprof.profiler.measure.flops import REGISTRY
from attnprof.profiler.measure.optimizer import host_serials
from attnprof.profiler.measure.step_marks import mark_step
from attnprof.profiler.measure.tracker import LM_HEAD_LOSS, OP, MemoryTracker, tensors_in
from attnprof.profiler.records import Point
from attnprof.profiler.safe_points import deferring

PASSES = ("param", "fwd", "bwd", "step")  # step: the optimizer's (issue 24), after backward
PROLOGUE = -1  # the period number of what a pass does before its first period (once in any stack)
# issue 24: the period number of what a pass does once after its last period and frees storages of
# every period at once: the forward's autocast region ending (its weight cache of casts cleared), the
# step's zero_grad (predict/compose_epilogue.py)
EPILOGUE = -2
MARK_LABEL = "attnprof.period"  # label[0] of the period marks this module puts into the trace


class TooBig(Exception):
    """A real run of a point passed its memory limit; predict it with fake tensors."""


# --- one run -----------------------------------------------------------------------------
def drive(work, tracker: MemoryTracker, *, track_parameters: Optional[Callable[[], None]] = None,
          phase: Callable[[str], None] = lambda name: None) -> None:
    """What every accounting of a point runs inside its tracker: register the parameters
    and inputs, forward, then backward and name the gradients. One function, so a real
    run, the full-depth fake run (``accounting.account``) and the traced one
    (``trace_point``) cannot drift apart. ``phase("forward")``/``phase("backward")`` is
    called as each pass starts; ``track_parameters`` may register ``work.params`` itself,
    in the same order."""
    if track_parameters is None:
        track_model_states(tracker, work, work.params)
    else:
        track_parameters()
    tracker.track([*work.inputs, work.dout], "inputs")  # dout: the upstream gradient, None if forward-only
    work.lm_scope = lambda on: setattr(tracker, "scope_kind", LM_HEAD_LOSS if on else None)  # issue 24: peak split

    def enter(name: str) -> None:
        tracker.phase = name  # issue 24: the pass the peak is reached in
        phase(name)

    with getattr(work, "kernels", contextlib.nullcontext)():  # issue 39: CUDA's autocast lists, for a GPU's step
        enter("forward")
        result = work.forward()  # the output (scope attention) or the loss (scope model)
        if not work.point.forward_only:
            enter("backward")  # (a checkpoint's recomputation re-enters autocast here)
            work.backward(result)
            tracker.mark_gradients(work.grads())
            if getattr(work, "optimizer", None) is not None:  # --- issue 24: optimizer ---
                enter("step")
                step_pass(work, tracker)
        del result


# --- issue 24: optimizer -----------------------------------------------------------------
def track_model_states(tracker: MemoryTracker, work, params: list) -> None:
    """Register parameters as live, each followed by its optimizer states (primed when the
    workload was built: profiler/measure/optimizer.py); without an optimizer exactly
    ``tracker.track(params, "parameters")``."""
    if getattr(work, "optimizer", None) is None:
        tracker.track(params, "parameters")
        return
    for p in params:
        tracker.track([p], "parameters")
        tracker.track(work.states_of(p), "optimizer_state")


def step_pass(work, tracker: MemoryTracker) -> None:
    """The optimizer step and the gradients released (``Workload.update``), everything it
    allocates counted as ``optimizer_temporaries``."""
    tracker.new_kind = "optimizer_temporaries"
    try:
        work.update()
    finally:
        tracker.new_kind = None


# --- the tracer --------------------------------------------------------------------------
class Tracer(MemoryTracker):
    """The memory tracker with its event trace on, and FLOPs per op in the same dispatch
    mode (one Python mode per op instead of two)."""

    def __init__(self, count_flops: bool = True, limit_bytes: Optional[int] = None):
        super().__init__(trace=True)
        self.count_flops = count_flops
        self.limit_bytes = limit_bytes  # raise TooBig when live tensors pass it (a real run)
        self.flops: dict[int, int] = {}  # trace position of an op's OP event -> its FLOPs
        self.reads: dict[int, tuple] = {}  # trace position of an op's OP event -> serials it read
        self.io: dict[int, tuple] = {}  # trace position of an op's OP event -> (bytes read, bytes written)
        self.before_op: Optional[Callable] = None  # called with an op's args before it runs (Marks: the step)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE:  # a fake tensor's .device (most of a fake run's dispatches): what
            fake_mode = getattr(args[0], "fake_mode", None)  # FakeTensor.__torch_dispatch__ answers,
            if fake_mode is not None:  # without passing through two more Python modes
                return torch.device("meta") if fake_mode.in_kernel_invocation else args[0].fake_device
        kwargs = kwargs or {}
        if self.before_op is not None:
            self.before_op(args)
        at = len(self.trace)
        out, outputs = self.dispatch(func, args, kwargs)
        formula, is_view = _facts(func)
        flops = 0
        if formula is not None and self.count_flops:
            flops = self.flops[at] = self.flops.get(at, 0) + int(formula(*args, **kwargs, out_val=out))
        if outputs is None:  # no OP event: an op that allocates nothing (prim.device)
            return out
        if self.limit_bytes is not None and self.current_bytes > self.limit_bytes:
            raise TooBig(f"live tensors passed {self.limit_bytes} bytes")
        costs = flops or len(self.trace) > at + 1  # an op that costs something: which storages it read
        if is_view and not costs:  # a view costs nothing and reads nothing: no walk over its inputs
            self.io[at] = (0, 0)
            return out
        inputs = tensors_in((args, kwargs))
        self.io[at] = (0, 0) if is_view else (_bytes_of(inputs), _bytes_of(outputs))
        if costs:
            self.reads[at] = self.live_serials(inputs)
        return out


_FACTS: dict = {}


def _facts(func) -> tuple:
    """(its FLOP formula or None, whether it is a view) of an op, memoised per overload."""
    found = _FACTS.get(func)
    if found is None:
        found = _FACTS[func] = (REGISTRY.get(getattr(func, "_overloadpacket", None)), bool(func.is_view))
    return found


def _bytes_of(tensors) -> int:
    """Bytes an op reads (its tensor inputs) or writes (its outputs): each distinct tensor's
    elements, but no more than its storage holds (a broadcast, stride-0 tensor reads the
    storage once). The time model (attnprof.profiler.timemodel) costs an op by these."""
    total, seen = 0, set()
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
    return total


_DEVICE = torch.ops.prim.device.default


class Marks:
    """Puts a mark into the trace where each pass and each period in it starts, and where a
    pass's epilogue starts (issue 24: autocast's cache clear ending the forward, the step's
    ``zero_grad``; period EPILOGUE); see the module docstring. ``ok`` is False when the module is not a stack of blocks with
    ``.f`` and ``.g`` whose parameters come first, block by block, in ``work.params``."""

    def __init__(self, tracer: Tracer, work, period: int):
        self.tracer, self.work, self.period = tracer, work, period
        self.phase = "param"
        self.handles: list = []
        blocks = getattr(work.module, "blocks", None)
        self.blocks = list(blocks) if isinstance(blocks, torch.nn.ModuleList) else []
        in_blocks = [p for b in self.blocks for p in b.parameters()]
        self.ok = (bool(self.blocks) and len(self.blocks) % period == 0
                   and all(isinstance(getattr(b, name, None), torch.nn.Module) for b in self.blocks for name in "fg")
                   and len(work.params) >= len(in_blocks)
                   and all(a is b for a, b in zip(work.params, in_blocks)))
        self.periods = len(self.blocks) // period if self.ok else 0
        self.current = None  # the last mark's (pass, period)
        if self.ok:
            work.leaving_autocast = lambda: self.mark("fwd", EPILOGUE) if self.phase == "fwd" else None
            for j, block in enumerate(self.blocks):
                if j % period == 0:
                    self.handles.append(block.f.register_forward_pre_hook(self._entering(j // period)))
                if j % period == period - 1:
                    self.handles.append(block.register_forward_hook(self._leaving(j // period)))
                    self.handles.append(block.g.register_forward_pre_hook(self._recomputing(j // period)))

    def mark(self, pass_: str, k: int) -> None:
        if (pass_, k) != self.current:
            self.current = (pass_, k)
            self.tracer.mark((MARK_LABEL, pass_, k))

    def _entering(self, k: int):
        """Before a period's first attention runs: in the forward, and where backward
        recomputes it (checkpoint, reversible)."""
        def hook(module, args):
            if self.phase in ("fwd", "bwd"):
                self.mark(self.phase, k)
        return hook

    def _recomputing(self, k: int):
        """Before a period's last feed-forward runs again in backward: where a reversible
        backward enters the period (it rebuilds each block g first, then f)."""
        def hook(module, args):
            if self.phase == "bwd":
                self.mark("bwd", k)
        return hook

    def _leaving(self, k: int):
        """After a period's last block ran forward: its output's gradient marks where
        backward enters the period."""
        def hook(module, args, out):
            if self.phase == "fwd" and isinstance(out, torch.Tensor) and out.requires_grad and torch.is_grad_enabled():
                out.register_hook(lambda grad: self.mark("bwd", k))
        return hook

    def track_parameters(self) -> None:
        """``track_model_states(work.params)``, in the same order, a mark before each period's."""
        if not self.ok:
            self.tracer.track(self.work.params, "parameters")
            return
        self.mark("param", PROLOGUE)
        count = 0
        for j, block in enumerate(self.blocks):
            if j % self.period == 0:
                self.mark("param", j // self.period)
            own = list(block.parameters())
            track_model_states(self.tracer, self.work, own)
            count += len(own)
        track_model_states(self.tracer, self.work, self.work.params[count:])  # the final norm's

    def groups(self) -> list:
        """``work.params`` per period, the final norm's with the last (issue 24: the step's)."""
        out = [[p for b in self.blocks[k * self.period:(k + 1) * self.period] for p in b.parameters()]
               for k in range(self.periods)]
        out[-1] += self.work.params[sum(len(g) for g in out):]
        return out

    def start(self, phase: str) -> None:
        self.phase = phase
        if self.ok:
            self.mark(phase, PROLOGUE)
            if phase == "step":  # issue 24: a for-loop optimizer's step, period by period
                self.handles += mark_step(self.work, self.groups(), self.tracer, lambda k: self.mark("step", k),
                                          lambda: self.mark("step", EPILOGUE))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@dataclass
class Traced:
    """One fake run with the tracer: the tracker's report, its trace, FLOPs per op."""

    point: Point
    peak_bytes: int
    breakdown_bytes: dict
    largest_at_peak: list
    trace: list  # tracker event tuples up to the end of the run
    flops: dict  # trace position -> FLOPs of the op whose OP event is there
    reads: dict  # trace position -> serials the op whose OP event is there read (ops that cost something)
    backward_at: int  # trace position where backward started (len(trace) if forward-only)
    categories: dict  # serial -> category, as the tracker names it at the end
    origins: dict  # serial -> (op, shape, dtype)
    periods: int  # K, when the run is marked for composition; 0 otherwise
    wall_ms: float = 0.0
    io: dict = field(default_factory=dict)  # trace position -> (bytes read, bytes written) of the op there
    # issue 24: the parameters the optimizer step updated, per period when marked (one group otherwise):
    # each (shape, stride, dtype, its gradient's (shape, stride) or None), as ``trace_step`` takes them
    step_params: list = field(default_factory=list)
    peak_op: str = ""  # issue 24: the op whose output reached the peak, and its pass (MemoryReport's)
    peak_pass: str = ""
    # issue 24: serials of the storages a GPU keeps on the host (the optimizer's step counters and
    # what a foreach step adds to them: optimizer.host_serials); the GPU's events leave them out
    host_serials: frozenset = frozenset()
    held: list = field(default_factory=list)  # trace_point's ``held(work)``: events the device holds beside the trace

    def op_rows(self) -> list:
        """Every op of the run in order, one row each: (trace position, pass, op, flops,
        bytes read, bytes written); what ``op_costs`` counts, and what a timeline lays out
        (profiler/timeline/)."""
        rows = []
        for at in sorted(set(self.io) | set(self.flops)):
            event = self.trace[at] if at < len(self.trace) else None
            name = event[1] if event is not None and event[0] == OP else None
            rows.append((at, "bwd" if at >= self.backward_at else "fwd", name, self.flops.get(at, 0),
                         *self.io.get(at, (0, 0))))
        return rows

    def op_costs(self) -> list:
        """Every op of the run, counted: ``op_costs_rows`` of {(pass, op, flops, read, written): n}."""
        costs: dict = {}
        for row in self.op_rows():
            count_into(costs, row[1:])
        return op_costs_rows(costs)

    @property
    def flops_fwd(self) -> int:
        return sum(f for at, f in self.flops.items() if at < self.backward_at)

    @property
    def flops_bwd(self) -> int:
        return sum(f for at, f in self.flops.items() if at >= self.backward_at)


@deferring  # Ctrl-C and SIGTERM wait for a safe point (profiler/safe_points.py)
def trace_point(point: Point, *, marks: bool = False, count_flops: bool = True, seed: int = 0,
                real_limit_bytes: Optional[int] = None, mode: Optional[type] = None,
                held: Optional[Callable] = None) -> Traced:
    """Run ``point`` once under FakeTensorMode with the tracer, exactly as
    ``accounting.account(point, fake=True)`` runs it; ``marks`` cuts the trace into runs.
    ``held(work)``: the events the GPU holds beside the trace (memmodel/trace.py ``held_parameters``).

    ``mode``: the fake mode's class (default: ``internals.new_fake_mode()``, the fast one
    where this torch passed ``internals.check``, which compares the two).
    ``real_limit_bytes``: run on real CPU tensors instead (the tracker's figures are the
    same, tests/profiler/measure/test_small_points.py), giving up with ``TooBig`` as soon
    as the live tensors pass the limit. A small point costs milliseconds this way, and no
    fake-tensor machinery is imported (see predict/fake_run.small_point)."""
    from attnprof.profiler.measure.workload import Workload

    start = time.perf_counter()
    torch.manual_seed(seed)
    # the mode is made inside light_dynamo: FakeTensorMode() reads torch._dynamo.config
    with light_dynamo(), (fake_mode(mode) if real_limit_bytes is None else contextlib.nullcontext()):
        work = Workload(point, "cpu")
        tracer = Tracer(count_flops, limit_bytes=real_limit_bytes)
        marker = Marks(tracer, work, work.spec.layer_period()) if marks and point.scope == "model" else None
        backward_at = []

        step_params, step_at = [], []

        def phase(name: str) -> None:
            if name == "backward":
                backward_at.append(len(tracer.trace))
            if name == "step":
                step_at.append(len(tracer.trace))
                step_params.extend(_layouts(marker.groups() if marker is not None and marker.ok else [work.params]))
            if marker is not None:
                marker.start({"forward": "fwd", "backward": "bwd"}.get(name, name))

        try:
            with tracer:
                drive(work, tracer, track_parameters=marker.track_parameters if marker else None, phase=phase)
                end = len(tracer.trace)
        finally:
            if marker is not None:
                marker.remove()
        report = tracer.report()
        categories = tracer.categories()
        origins = tracer.origins()
        host = host_serials(tracer, getattr(work, "optimizer", None), step_at[0] if step_at else None, origins)
        held_events = held(work) if held is not None else []
    return Traced(point, report.peak_bytes, report.breakdown_bytes, report.largest_at_peak, tracer.trace[:end],
                  tracer.flops, tracer.reads, backward_at[0] if backward_at else end, categories, origins,
                  marker.periods if marker is not None and marker.ok else 0, (time.perf_counter() - start) * 1e3,
                  tracer.io, step_params, report.peak_op, report.peak_pass, host, held_events)


def _layouts(groups: list) -> list:
    """Each group's parameters as (shape, stride, dtype, its gradient's (shape, stride) or None)."""
    return [[(tuple(p.shape), p.stride(), p.dtype, None if p.grad is None else (tuple(p.grad.shape), p.grad.stride()))
             for p in group] for group in groups]


def fake_mode(mode: Optional[type]):
    """The fake mode a trace runs in (imported when needed: the fake-tensor machinery costs ~0.8 s)."""
    from attnprof.profiler.measure.internals import new_fake_mode

    return new_fake_mode() if mode is None else mode()


def count_into(counter: dict, key: tuple, n: int = 1) -> None:
    counter[key] = counter.get(key, 0) + n


def op_costs_rows(costs: dict) -> list:
    """An op-cost histogram as sorted JSON-ready rows ``[pass, op, flops, bytes_read,
    bytes_written, count]``: the per-op input of the time model (attnprof.profiler.timemodel).
    ``op`` is the aten overload's name ("mm.default"); None for FLOPs counted without an
    OP event. Ops that cost nothing (views, detach: no FLOPs, no bytes; they launch no
    kernel) are left out: they are also the one thing a reversible backward's composition
    does not count per layer (see test_the_composed_event_sequence_is_the_full_runs)."""
    return sorted(([*key, n] for key, n in costs.items() if any(key[2:])), key=lambda r: (r[0], str(r[1]), r[2:]))
