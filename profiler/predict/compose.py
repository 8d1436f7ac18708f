"""Deep stacks at the cost of three periods: trace once, compose the full depth, exactly.

A fake run costs time per op, not per byte, so an L-block prediction costs L blocks of
dispatch. The blocks are identical up to the variant's layer period p, and so is what
each one allocates and frees. A prediction runs the stack ``TRACED_PERIODS`` = 3 periods
deep (first, one middle, last) with the tracker's ordered event trace on, cuts the trace
into *runs* at marks (a pass's prologue, then one run per period; passes: parameters,
forward, backward), and builds the L-block event sequence from them (K = L/p periods):

    param: pro [0] [1]x(K-2) [K-1]   fwd: pro [0] [1]x(K-2) [K-1] epi   bwd: pro [K-1] [1]x(K-2) [0]
    step:  pro [0] [1]x(K-2) [K-1] epi   (issue 24: a for-loop optimizer, measure/drive.py)

Every storage a run frees or reads is named relative to the run's period, so each copy
of the middle frees and reads its own neighbours'. The peak, the breakdown at the peak,
the largest storages then and the FLOPs follow from per-run summaries in O(K); the whole
event sequence is there for who needs it (``Composition.events``).

Epilogues (issue 24): the end of the forward's autocast region and the optimizer's
``zero_grad`` free storages of every period at once, once after a pass's last period
(compose_epilogue.py). A foreach or fused optimizer step is one op over every parameter:
it is cut off and merged after the composed passes instead (compose_step.py).

Why it is exact, and when it refuses. The composed sequence equals the L-block run's
when what a period does depends only on its neighbours, and the runs that happen once
(prologues, first and last period) do not loop over the periods. The trace shows where
that is in doubt, and then the prediction runs all L blocks instead (``NotComposable``,
nothing is guessed):
- each pass's runs come once each, in order, periods in one direction;
- a middle run refers (frees; reads, in an op that allocates or counts FLOPs; names an
  op's argument) only to its own and its neighbours' storages, and reads a prologue's
  without freeing it; a run that happens once refers only to the others that do and to
  the middle period next to it, never to both the middle and the far end of a pass (a
  loop over every period, e.g. an epilogue over all layers' parameters);
- where the middle run refers to a neighbour's storage, its own storage at that place
  has the same size, category and creating op (a middle neighbour can stand in), and the
  first/last runs free the same places of the middle as the middle frees of its own
  neighbours (every storage is freed exactly once);
- composing the traced depth reproduces the tracker's own report to the byte.
Plug-in code cannot see L (only its layer_index), so depth-dependence can only come from
the stack itself: the test suite compares the composition with full-depth fake runs of
every variant, mode, scope, option family and dtype at depths 1-24, and checks that a
composition with a layer too few or too many is caught (tests/profiler/predict/test_compose.py).

The trace and its marks come from ``profiler/measure/drive.py`` (``trace_point``). The
module is over 400 lines because it is one algorithm: cutting the trace into runs, the
checks that make composing it exact, and the composed figures read from those runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from attnprof.profiler.measure.drive import EPILOGUE, MARK_LABEL, PROLOGUE, Traced, count_into, op_costs_rows
from attnprof.profiler.measure.tracker import ALLOC, FREE, MARK, OP, TensorInfo, breakdown_of
from attnprof.profiler.predict.compose_epilogue import Epilogue, at_depth as epilogue_at_depth, freed_by_category, problem
from attnprof.profiler.predict.compose_step import StepNotComposable, StepSummary, at_depth, summarise

TRACED_PERIODS = 3  # first, one middle, last: the fewest that hold every kind of period


class NotComposable(Exception):
    """The traced stack does not compose to another depth; run every block instead."""


# --- runs --------------------------------------------------------------------------------
@dataclass
class _Run:
    tag: tuple  # (pass, period)
    events: list = field(default_factory=list)  # ("A", i) | ("F", ref) | ("O", name, info, flops, reads, io) | ("M", label)
    allocs: list = field(default_factory=list)  # i -> (nbytes, category, origin)
    alloc_at: list = field(default_factory=list)  # i -> position of its ("A", i) in events
    free_at: dict = field(default_factory=dict)  # reference -> position of the ("F", reference) freeing it

    def signature(self, i: int) -> tuple:
        return self.allocs[i]


def _runs(traced: Traced) -> tuple:
    """({(pass, period) -> _Run}, {pass -> its Epilogue}), references relative:
    ref = (pass, period offset, alloc index); an epilogue's absolute (pass, period, index)."""
    runs: list[_Run] = []
    home: dict[int, tuple[int, int]] = {}  # serial -> (run index, alloc index)
    seen = set()
    current = None
    epilogue = None  # while its events come: the Epilogue
    found: dict = {}

    def ref(serial):
        if serial is None:
            return None
        if serial not in home:
            raise NotComposable("a storage from before the trace")
        r, i = home[serial]
        tag = runs[r].tag
        return (tag[0], tag[1] - current.tag[1], i)

    for at, event in enumerate(traced.trace):
        kind = event[0]
        if at in traced.flops and kind != OP:  # an op with FLOPs but no OP event: it ran before this event
            if current is None:
                raise NotComposable("FLOPs before the first mark")
            current.events.append(("O", None, None, traced.flops[at], (), (0, 0)))
        if kind == MARK and isinstance(event[1], tuple) and event[1][:1] == (MARK_LABEL,):
            tag = tuple(event[1][1:])
            epilogue = None
            if tag[1] == EPILOGUE:
                if current is None or tag[0] in found or current.tag[0] != tag[0]:
                    raise NotComposable(f"an epilogue {tag} not after a run of its pass")
                epilogue = found[tag[0]] = Epilogue(current.tag)
                continue
            if current is None or tag != current.tag:
                if tag in seen:
                    raise NotComposable(f"run {tag} comes back after another run")
                seen.add(tag)
                current = _Run(tag)
                runs.append(current)
            continue
        if current is None:
            raise NotComposable("events before the first mark")
        if epilogue is not None:
            if kind == FREE and event[1] in home and at not in traced.flops:
                r, i = home[event[1]]
                epilogue.events.append(("F", (*runs[r].tag, i)))
            elif kind == OP and event[2] is None and at not in traced.flops and not any(traced.io.get(at, ())):
                epilogue.events.append(("O", event[1]))  # a profiler mark (record_function): costs nothing
            else:
                raise NotComposable(f"the epilogue after {epilogue.after} does more than free storages")
            continue
        if kind == ALLOC:
            serial, nbytes = event[1], event[2]
            home[serial] = (len(runs) - 1, len(current.allocs))
            current.alloc_at.append(len(current.events))
            current.events.append(("A", len(current.allocs)))
            current.allocs.append((nbytes, traced.categories.get(serial, "temporaries"), traced.origins.get(serial)))
        elif kind == FREE:
            current.events.append(("F", ref(event[1])))
        elif kind == OP:
            reads = tuple(ref(serial) for serial in traced.reads.get(at, ()))
            current.events.append(("O", event[1], _encode_info(event[2], ref), traced.flops.get(at, 0), reads,
                                   traced.io.get(at, (0, 0))))
        elif kind == MARK:
            current.events.append(("M", event[1]))
        else:
            raise NotComposable(f"unknown trace event {kind!r}")
    if any(at >= len(traced.trace) for at in traced.flops):
        raise NotComposable("FLOPs after the last event")
    for run in runs:
        run.free_at = {event[1]: e for e, event in enumerate(run.events) if event[0] == "F"}
    return {run.tag: run for run in runs}, found


def _encode_info(info, ref):
    """An OP event's info with each argument's serial as a relative reference."""
    if info is None:
        return None
    if not (isinstance(info, dict) and isinstance(info.get("args"), list)
            and all(a is None or isinstance(a, TensorInfo) for a in info["args"])):
        raise NotComposable("an OP event's info is not in the known form")
    args = tuple(None if a is None else (ref(a.serial), a.shape, a.stride, a.dtype, a.requires_grad)
                 for a in info["args"])
    scalars, named = info.get("scalars"), info.get("kwargs")  # the other arguments, plain data
    return (bool(info.get("grad_enabled")), args, None if scalars is None else tuple(scalars),
            None if named is None else tuple(named.items()))


def _decode_info(encoded, serial_of):
    if encoded is None:
        return None
    grad_enabled, args, scalars, named = encoded
    info = {"grad_enabled": grad_enabled,
            "args": [None if a is None else TensorInfo(None if a[0] is None else serial_of(a[0]), *a[1:])
                     for a in args]}
    if scalars is not None:
        info["scalars"] = list(scalars)
    if named is not None:
        info["kwargs"] = dict(named)
    return info


def _refs(run: _Run):
    """Every reference a run makes: its frees, and the storages its ops read (those that
    allocate or count FLOPs) or describe."""
    for event in run.events:
        if event[0] == "F":
            yield event[1]
        elif event[0] == "O":
            yield from event[4]
            if event[2] is not None:
                yield from (a[0] for a in event[2][1] if a is not None and a[0] is not None)


# --- composition -------------------------------------------------------------------------
@dataclass
class _Summary:
    net: int = 0  # bytes allocated minus freed over the run
    net_by: dict = field(default_factory=dict)  # the same by category
    top: int | None = None  # the highest point above the run's start, reached at an allocation
    top_at: int = -1  # first event index where it is reached
    top_by: dict = field(default_factory=dict)  # category deltas up to and including top_at
    flops: int = 0
    allocs: int = 0
    costs: dict = field(default_factory=dict)  # (op, flops, bytes read, bytes written) -> count


@dataclass
class Composition:
    """A traced stack, checked and summarised, ready to compose to any depth."""

    traced: Traced
    runs: dict  # (pass, period) -> _Run, at the traced depth
    passes: tuple  # the passes present, in order
    periods: int  # K of the trace
    shape: dict = field(default_factory=dict)  # pass -> (has a prologue, periods ascending)
    summaries: dict = field(default_factory=dict)  # (pass, period) -> _Summary
    step: Optional[StepSummary] = None  # the optimizer step at the traced depth (compose_step.py), if any
    epilogues: dict = field(default_factory=dict)  # pass -> its Epilogue (issue 24: autocast's, the step's)
    nets: dict = field(default_factory=dict)  # k -> _epilogue_nets(k), computed once (figures and peak_op ask)

    @classmethod
    def of(cls, traced: Traced) -> "Composition":
        if traced.periods != TRACED_PERIODS:
            raise NotComposable(f"traced {traced.periods} periods, need {TRACED_PERIODS}")
        marked_step = (MARK, (MARK_LABEL, "step", 0)) in traced.trace  # a for-loop step: periods (drive.py)
        cut, step = (traced, None) if marked_step else _split_step(traced)
        runs, epilogues = _runs(cut)
        k = traced.periods
        passes = tuple(dict.fromkeys(tag[0] for tag in runs))
        shape = {}  # pass -> (has a prologue, periods ascending)
        for p in passes:
            periods = [tag[1] for tag in runs if tag[0] == p]
            prologue = periods[0] == PROLOGUE
            periods = periods[1:] if prologue else periods
            if periods not in (list(range(k)), list(reversed(range(k)))):
                raise NotComposable(f"pass {p} runs through periods {periods}, not 0..{k - 1} in one direction")
            shape[p] = (prologue, periods[0] == 0)
        for epilogue in epilogues.values():
            if epilogue.after[1] != k - 1 or not shape[epilogue.after[0]][1]:
                raise NotComposable(f"an epilogue after {epilogue.after}, not after its pass's last period")
        comp = cls(traced, runs, passes, k, shape, step=step, epilogues=epilogues)
        if list(runs) != comp.instances(k):
            raise NotComposable(f"runs in the order {list(runs)}, not pass after pass")
        comp._check()
        return comp

    def instances(self, k: int) -> list:
        """Runs in the order they happen in a k-period stack."""
        out = []
        for p in self.passes:
            prologue, ascending = self.shape[p]
            out += [(p, PROLOGUE)] if prologue else []
            out += [(p, c) for c in (range(k) if ascending else reversed(range(k)))]
        return out

    def _target(self, run: _Run, ref) -> _Run:
        """The traced run a reference of a traced run names."""
        return self.runs[(ref[0], run.tag[1] + ref[1])]

    def _fixed(self, t: int) -> bool:
        """Runs that happen once in a stack of any depth: a pass's prologue, the first and
        the last period; the middle period (1) is the one that repeats."""
        return t in (PROLOGUE, 0, self.periods - 1)

    def tau(self, c: int, k: int) -> int:
        """The traced period that period c of a k-period stack repeats."""
        return c if c in (PROLOGUE, 0) else self.periods - 1 if c == k - 1 else 1

    def _resolve(self, c: int, ref, k: int) -> tuple:
        """The composed run that a reference from period c of a k-period stack names: the
        middle refers to its neighbours and to prologues; the runs that happen once to each
        other and to the middle period next to them."""
        t = self.tau(c, k)
        target = t + ref[1]
        if t == 1 and target != PROLOGUE:
            return ref[0], c + ref[1]
        if target == PROLOGUE or target == 0:
            return ref[0], target
        if target == self.periods - 1:
            return ref[0], k - 1
        return ref[0], 1 if t == 0 else k - 2  # the middle period next to the first or the last

    def _check(self) -> None:
        middle, last = 1, self.periods - 1
        for run in self.runs.values():
            t = run.tag[1]
            frees = set(_frees(run))
            for ref in _refs(run):
                target = t + ref[1]
                if ref[0] not in self.passes or (ref[0], target) not in self.runs:
                    raise NotComposable(f"run {run.tag} refers to {ref}: no such run")
                if t == middle:  # its own and its neighbours' storages; a prologue's, without freeing it
                    fine = abs(ref[1]) <= 1 or (target == PROLOGUE and ref not in frees)
                else:  # each other's, and the middle's next to it
                    fine = self._fixed(target) or t in (0, last)
                if not fine:
                    raise NotComposable(f"run {run.tag} refers to {ref}: beyond its neighbours")
            if t != middle:
                # A run that happens once may name the other such runs (the loss, the output), but
                # naming both the middle period and the far end of one pass is a loop over every
                # period (e.g. an epilogue over all parameters): it would grow with depth.
                for q in self.passes:
                    named = {t + ref[1] for ref in _refs(run) if ref[0] == q} - {PROLOGUE, t}
                    if middle in named and named - {middle}:
                        raise NotComposable(f"run {run.tag} refers to periods {sorted(named)} of pass {q}: "
                                            f"beyond its neighbours")
        for p in self.passes:
            mid = self.runs[(p, middle)]
            for ref in set(_refs(mid)):
                if ref[1] != 0 and mid.tag[1] + ref[1] != PROLOGUE:
                    # a neighbour's storage: the middle's own at that place must look the same,
                    # since a middle neighbour stands in for the first or last one
                    own = self.runs[(ref[0], middle)]
                    if ref[2] >= len(own.allocs) or self._target(mid, ref).signature(ref[2]) != own.signature(ref[2]):
                        raise NotComposable(f"run {mid.tag} refers to {ref}, unlike its own storage there")
            for edge, step in ((0, 1), (last, -1)):
                # what the first (last) run frees of the middle period, the middle run must free
                # of its next (previous) one: then every storage is freed exactly once
                for q in self.passes:
                    at_edge = {r[2] for r in _frees(self.runs[(p, edge)]) if r[0] == q and r[1] == step}
                    in_middle = {r[2] for r in _frees(mid) if r[0] == q and r[1] == step}
                    if at_edge != in_middle:
                        raise NotComposable(f"runs {(p, edge)} and {mid.tag} free different storages of "
                                            f"their neighbours in pass {q}")
        self._check_epilogue()
        self.summaries = {tag: self.summarise(run) for tag, run in self.runs.items()}
        self._check_identity()

    def _check_epilogue(self) -> None:
        """Each epilogue composes as a loop over every period (compose_epilogue.problem)."""
        for epilogue in self.epilogues.values():
            why = problem(epilogue.frees, self.runs, self.periods)
            if why:
                raise NotComposable(why)

    def epilogue_events(self, pass_: str, k: int) -> list:
        """A pass's epilogue in a k-period stack (compose_epilogue.at_depth); [] if none."""
        epilogue = self.epilogues.get(pass_)
        return [] if epilogue is None else epilogue_at_depth(epilogue, k, self.periods)

    def _epilogue_nets(self, k: int) -> dict:
        """(pass, k - 1), the run an epilogue follows in a k-period stack -> its bytes freed by
        category (memoised per k in ``nets``)."""
        def allocs_of(q, c):
            return self.runs[(q, self.tau(c, k))].allocs

        found = self.nets.get(k)
        if found is None:
            found = self.nets[k] = {(p, k - 1): freed_by_category(self.epilogue_events(p, k), allocs_of)
                                    for p in self.epilogues}
        return found

    def summarise(self, run: _Run) -> _Summary:
        s = _Summary()
        level, by = 0, {}
        for at, event in enumerate(run.events):
            if event[0] == "A":
                nbytes, category, _ = run.allocs[event[1]]
                level += nbytes
                by[category] = by.get(category, 0) + nbytes
                s.allocs += 1
                if s.top is None or level > s.top:
                    s.top, s.top_at, s.top_by = level, at, dict(by)
            elif event[0] == "F":
                nbytes, category, _ = self._target(run, event[1]).allocs[event[1][2]]
                level -= nbytes
                by[category] = by.get(category, 0) - nbytes
            elif event[0] == "O":
                s.flops += event[3]
                count_into(s.costs, (event[1], event[3], *event[5]))
        s.net, s.net_by = level, by
        return s

    def _check_identity(self) -> None:
        """Composed to the traced depth, the figures must be the tracker's own."""
        t = self.traced
        got = self.figures(self.periods)
        want = (t.peak_bytes, t.breakdown_bytes, t.largest_at_peak, t.flops_fwd, t.flops_bwd)
        if (got != want or self.op_costs(self.periods) != t.op_costs()
                or self.peak_op(self.periods) != (t.peak_op, t.peak_pass)):
            raise NotComposable("composing the traced depth does not reproduce its own figures")

    # --- the composed stack ---------------------------------------------------------------
    def template(self, tag: tuple, k: int) -> tuple:
        """The traced run that run ``tag`` of a k-period stack repeats."""
        return tag[0], self.tau(tag[1], k)


    def figures(self, k: int) -> tuple:
        """(peak, breakdown at the peak, largest storages then, FLOPs fwd, FLOPs bwd) of a
        stack of k periods."""
        if k < self.periods:
            raise ValueError(f"composes {self.periods} periods or more, not {k}")
        instances = self.instances(k)
        base, by, peak, at, peak_by = 0, {}, 0, None, {}
        flops = {p: 0 for p in self.passes}
        epilogues = self._epilogue_nets(k)
        for r, tag in enumerate(instances):
            s = self.summaries[self.template(tag, k)]
            if s.top is not None and base + s.top > peak:
                peak, at = base + s.top, (r, s.top_at)
                peak_by = _plus(by, s.top_by)
            base += s.net
            by = _plus(by, s.net_by)
            flops[tag[0]] += s.flops
            if tag in epilogues:  # it only frees: no new peak
                base += sum(epilogues[tag].values())
                by = _plus(by, epilogues[tag])
        step, after = self.step_at(k), ()
        if step is not None:  # after the composed backward: its end level, plus the step's top
            flops["bwd"] = flops.get("bwd", 0) + step.flops  # timed with the backward (records: time_bwd_ms)
            if step.top is not None and base + step.top > peak:
                peak, peak_by = base + step.top, _plus(by, step.top_by)
                at, after = (len(instances) - 1, len(self.runs[self.template(instances[-1], k)].events)), step.live_at_top
        breakdown = breakdown_of(peak_by)
        largest = self._largest(instances, k, at, after=after) if at is not None else []
        fwd = sum(v for p, v in flops.items() if p not in ("bwd", "step"))
        return peak, breakdown, largest, fwd, flops.get("bwd", 0) + flops.get("step", 0)  # the step timed with bwd

    def peak_op(self, k: int) -> tuple:
        """(the op whose output reaches the peak, its pass "forward" | "backward" | "step") of a
        stack of k periods, found as ``figures`` finds the peak (the first strictly higher
        level); ("", "") where a registered tensor reaches it (issue 24: peak split)."""
        base, peak, where = 0, 0, None
        epilogues = self._epilogue_nets(k)
        for tag in self.instances(k):
            s = self.summaries[self.template(tag, k)]
            if s.top is not None and base + s.top > peak:
                peak, where = base + s.top, (tag, s.top_at)
            base += s.net + sum(epilogues.get(tag, {}).values())
        step = self.step_at(k)
        if step is not None and step.top is not None and base + step.top > peak:
            origin = step.live_at_top[-1][2] if step.live_at_top else None
            op = (origin or ("",))[0]
            return op, "step" if op else ""
        if where is None:
            return "", ""
        tag, at = where
        run = self.runs[self.template(tag, k)]
        op = (run.allocs[run.events[at][1]][2] or ("",))[0]
        return op, {"fwd": "forward", "bwd": "backward", "step": "step"}.get(tag[0], "") if op else ""

    def op_costs(self, k: int) -> list:
        """Every op of a stack of k periods, counted (``op_costs_rows``), pass by pass."""
        costs: dict = {}
        for tag in self.instances(k):
            pass_ = "bwd" if tag[0] in ("bwd", "step") else "fwd"  # the step is timed with the backward
            for key, n in self.summaries[self.template(tag, k)].costs.items():
                count_into(costs, (pass_, *key), n)
        step = self.step_at(k)
        for key, n in (step.costs.items() if step is not None else ()):
            count_into(costs, ("bwd", *key), n)
        return op_costs_rows(costs)

    def step_at(self, k: int) -> Optional[StepSummary]:
        """The optimizer step of a k-period stack: the traced one, or run alone at full depth."""
        if self.step is None or k == self.periods:
            return self.step
        return at_depth(self.traced.point, self.traced.step_params, k)

    def _largest(self, instances: list, k: int, at: tuple, count: int = 5, after: tuple = ()) -> list:
        """The ``count`` biggest storages live at the peak, biggest first, ties by age, as
        ``MemoryTracker.largest_at_peak`` lists them."""
        offsets, total = {}, 0
        for tag in instances:
            offsets[tag] = total
            total += self.summaries[self.template(tag, k)].allocs
        peak_r, peak_e = at
        freed = self._freed_before(instances, k, at)
        candidates = []
        for r, tag in enumerate(instances[:peak_r + 1]):
            run = self.runs[self.template(tag, k)]
            found = 0
            for i in sorted(range(len(run.allocs)), key=lambda i: (-run.allocs[i][0], i)):
                if r == peak_r and run.alloc_at[i] > peak_e:
                    continue
                if (*tag, i) in freed:
                    continue
                candidates.append((-run.allocs[i][0], offsets[tag] + i, run.allocs[i]))
                found += 1
                if found == count:
                    break
        out = []
        # ``after``: storages of the optimizer step live at its top (compose_step.py), younger than all
        candidates += [(-alloc[0], total + j, alloc) for j, alloc in enumerate(after)]
        for _, _, (nbytes, category, origin) in sorted(candidates)[:count]:
            op, shape, dtype = origin or ("", (), "")
            out.append({"op": op or "(existing)", "shape": list(shape), "dtype": dtype, "category": category,
                        "bytes": nbytes})
        return out

    def _freed_before(self, instances: list, k: int, at: tuple) -> set:
        """(pass, period, alloc index) of every storage of a k-period stack freed before
        position ``at`` = (run, event): each free resolved as ``events`` resolves it."""
        peak_r, peak_e = at
        freed = set()
        for r, tag in enumerate(instances[:peak_r + 1]):
            for ref, e in self.runs[self.template(tag, k)].free_at.items():
                if r < peak_r or e < peak_e:
                    freed.add((*self._resolve(tag[1], ref, k), ref[2]))
            if r < peak_r and tag[1] == k - 1 and tag[0] in self.epilogues:
                freed.update(ref for kind, ref in self.epilogue_events(tag[0], k) if kind == "F")
        return freed

    def events(self, k: int):
        """The composed event sequence of a k-period stack, as the tracker would record it
        (serials renumbered in allocation order, this module's marks left out), each OP
        event followed by nothing else: FLOPs come as a parallel ``(position, flops)``."""
        instances = self.instances(k)
        offsets, total = {}, 0
        for tag in instances:
            offsets[tag] = total
            total += self.summaries[self.template(tag, k)].allocs
        out, flops = [], {}
        for tag in instances:
            run = self.runs[self.template(tag, k)]

            def serial_of(ref, c=tag[1]):
                return offsets[self._resolve(c, ref, k)] + ref[2] + 1

            for event in run.events:
                if event[0] == "A":
                    nbytes, _, origin = run.allocs[event[1]]
                    out.append((ALLOC, offsets[tag] + event[1] + 1, nbytes, (origin or ("",))[0]))
                elif event[0] == "F":
                    out.append((FREE, serial_of(event[1])))
                elif event[0] == "O":
                    if event[1] is not None:
                        out.append((OP, event[1], _decode_info(event[2], serial_of)))
                    if event[3]:
                        flops[len(out) - 1] = flops.get(len(out) - 1, 0) + event[3]
                else:
                    out.append((MARK, event[1]))
            if tag[1] == k - 1 and tag[0] in self.epilogues:
                out += [(FREE, offsets[ref[:2]] + ref[2] + 1) if kind == "F" else (OP, ref, None)
                        for kind, ref in self.epilogue_events(tag[0], k)]
        return out, flops


def _split_step(traced: Traced) -> tuple:
    """(the trace up to the optimizer step's mark, the step's summary or None)."""
    mark = (MARK_LABEL, "step", PROLOGUE)
    at = next((at for at in range(len(traced.trace) - 1, -1, -1) if traced.trace[at] == (MARK, mark)), None)
    if at is None:
        return traced, None
    if len(traced.step_params) != TRACED_PERIODS or at in traced.flops:
        raise NotComposable("the optimizer step's parameters are not known per period")
    try:
        step = summarise(traced.trace, at + 1, traced.flops, traced.io, traced.categories, traced.origins)
    except StepNotComposable as exc:
        raise NotComposable(str(exc)) from None

    def before(d: dict) -> dict:
        return {position: v for position, v in d.items() if position < at}

    return replace(traced, trace=traced.trace[:at], flops=before(traced.flops), reads=before(traced.reads),
                   io=before(traced.io)), step


def _frees(run: _Run) -> list:
    return [event[1] for event in run.events if event[0] == "F"]


def _plus(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + value
    return out
