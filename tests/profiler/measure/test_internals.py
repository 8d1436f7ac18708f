"""The fast path checks torch's private fake-tensor internals once per process and steps
aside, in one line, where they are missing or behave differently: slower, never wrong."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure import internals, quickfake
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.measure.internals import new_fake_mode
from attnprof.profiler.measure.quickfake import CpuFakeTensorMode, QuickFakeTensorMode
from attnprof.profiler.records import Point, Shape

POINT = Point("lsh[bucket_size=16]", "checkpoint", "model", Shape(batch=1, seq_len=128, d_model=32, heads=2, layers=2,
                                                                   dtype="bfloat16"))


@pytest.fixture(autouse=True)
def fresh_verdict(monkeypatch):
    monkeypatch.setattr(FakeTensorMode, "cache", {})
    memo = QuickFakeTensorMode.swap_memo({})
    internals.reset_for_tests()
    yield
    internals.reset_for_tests()
    QuickFakeTensorMode.swap_memo(memo)


def figures(acc) -> tuple:
    return acc.peak_bytes, acc.breakdown_bytes, acc.largest_at_peak, acc.flops_fwd, acc.flops_bwd


def test_this_torch_is_trusted_silently(capsys):
    assert internals.trusted() and internals.problem() == ""
    assert type(new_fake_mode()) is QuickFakeTensorMode
    assert capsys.readouterr().err == ""


def test_every_fake_mode_avoids_device_init():
    """The property torch reads on entering the mode and on every op: never a CUDA query."""
    assert new_fake_mode().avoid_device_init is True
    assert new_fake_mode(quick=False).avoid_device_init is True and type(new_fake_mode(quick=False)) is CpuFakeTensorMode


def _steps_aside(capsys) -> str:
    assert internals.trusted() is False
    assert type(new_fake_mode()) is CpuFakeTensorMode
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fast prediction path" in err[0] and "same figures" in err[0], err
    assert figures(predict(POINT)) == figures(account(POINT, fake=True, count_flops=True))  # slower, never wrong
    assert internals.trusted() is False and capsys.readouterr().err == ""  # said once per process
    return err[0]


def test_a_missing_internal_turns_the_fast_path_off(monkeypatch, capsys):
    monkeypatch.setattr(FakeTensorMode, "_cache_key", lambda self, state, op, arguments, kw: None)
    internals.reset_for_tests()
    assert "_cache_key" in _steps_aside(capsys)


def test_a_changed_view_internal_is_caught(monkeypatch, capsys):
    """A torch whose views would come out at another offset than ATen's (simulated by native
    views that drop the storage offset): the tiny trace differs."""
    original = quickfake.native_view

    def at_offset_zero(fake_mode, func, args, kwargs):
        out = original(fake_mode, func, args, kwargs)
        if out is None or func is torch.ops.aten.as_strided.default:
            return out
        return torch.ops.aten.as_strided.default(args[0], out.shape, out.stride(), 0)

    monkeypatch.setattr(quickfake, "native_view", at_offset_zero)
    assert "different tensors" in _steps_aside(capsys)


def test_a_changed_key_internal_is_caught(monkeypatch, capsys):
    """A torch whose key holds a field the quick key does not read (simulated by a quick key
    without strides): the memo hands a transposed copy the contiguous one's layout."""
    original = QuickFakeTensorMode.flatten

    def without_strides(self, out, value):
        if type(value).__name__ == "FakeTensor":
            out.extend((value.dtype, value.shape))
            return
        original(self, out, value)

    monkeypatch.setattr(QuickFakeTensorMode, "flatten", without_strides)
    assert "different tensors" in _steps_aside(capsys)


def test_an_internal_that_raises_is_one_that_differs(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise AttributeError("torch moved it")

    monkeypatch.setattr(internals, "tiny_trace", broken)
    assert "torch moved it" in _steps_aside(capsys)
