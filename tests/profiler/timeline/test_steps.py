"""Ops end to end in modelled time; each event in its op, pass and period."""

from timeline_points import RATES, point

from attnprof.profiler.measure.drive import MARK_LABEL, PROLOGUE, trace_point
from attnprof.profiler.measure.tracker import ALLOC, MARK, OP
from attnprof.profiler.timeline.steps import (PHASE_NAMES, Op, Steps, event_times, lay_out, op_ordinals, phase_name,
                                              runs_of)
from attnprof.profiler.timemodel.roofline import op_time_s


def test_ops_are_laid_end_to_end_with_the_time_models_durations():
    traced = trace_point(point(), marks=True)
    steps = lay_out(traced, RATES)
    t = 0.0
    for op in steps.ops:
        assert op.start_us == t and op.dur_us >= 0  # a view launches no kernel: 0
        t += op.dur_us
    assert all(op.dur_us > 0 for op in steps.ops if "mm" in op.name)
    rows = [r for r in traced.op_rows() if any(r[3:])]
    assert len(rows) == len(steps.ops)
    at, pass_, name, flops, read, written = rows[3]
    assert steps.ops[3].dur_us == op_time_s(pass_, name, flops, read, written, RATES, "float32", 16) * 1e6


def test_runs_follow_the_period_marks_and_without_them_forward_then_backward():
    events = [(MARK, (MARK_LABEL, "param", PROLOGUE)), (ALLOC, 1, 8, ""), (MARK, (MARK_LABEL, "fwd", 0)),
              (OP, "mm.default", None), (MARK, (MARK_LABEL, "bwd", 0)), (OP, "mm.default", None)]
    assert runs_of(events, 4) == [("param", PROLOGUE)] * 2 + [("fwd", 0)] * 2 + [("bwd", 0)] * 2
    plain = [e for e in events if e[0] != MARK]
    assert runs_of(plain, 2) == [("fwd", None), ("fwd", None), ("bwd", None)]


def test_events_in_one_op_are_spread_over_it():
    steps = Steps([Op(0, "a", "fwd", ("fwd", 0), 0.0, 10.0), Op(2, "b", "fwd", ("fwd", 0), 10.0, 4.0)],
                  [], [], True, "d", 1)
    times = event_times([-1, 0, 0, 1], [True, True, True, True], steps)
    assert times == [0.0, 10 / 3, 20 / 3, 12.0]


def test_module_paths_and_phase_names():
    steps = Steps([], [], [], True, "d", 2)
    assert steps.module_path(("fwd", 3)) == "blocks.6-7"
    assert steps.module_path(("fwd", PROLOGUE)) == "" == steps.module_path(("fwd", None))
    assert Steps([], [], [], True, "d", 1).module_path(("bwd", 3)) == "blocks.3"
    assert phase_name("bwd") == "backward" and phase_name("new_pass") == "new_pass"
    assert set(PHASE_NAMES) >= {"param", "fwd", "bwd"}


def test_op_ordinals():
    assert op_ordinals([(ALLOC, 1, 8, ""), (OP, "x", None), (ALLOC, 2, 8, "x"), (OP, "y", None)]) == [0, 1, 1, 2]
