"""QuickFakeTensorMode: torch's fake-tensor dispatch with a memoised cache key. A fake run
through it records exactly what plain FakeTensorMode records; the memo is used; a quick
key that leaves out a field torch's key has is caught."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure import quickfake
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.quickfake import QuickFakeTensorMode
from attnprof.profiler.records import Point, Shape

POINTS = [Point(label, mode, "model", Shape(batch=2, seq_len=1024, d_model=64, heads=4, layers=3, dtype=dtype))
          for label, mode, dtype in [("sdpa", "checkpoint", "float32"), ("lsh[bucket_size=32]", "reversible", "bfloat16"),
                                     ("sparse_fixed[summary=4]", "plain", "float32"), ("talking_heads", "reversible",
                                                                                        "float32"),
                                     ("sliding_window[window=128]", "checkpoint", "float32")]]
POINTS += [  # issue 24: the training step's ops (grouped K/V through expand, RoPE, SwiGLU, RMSNorm, the LM head;
    # autocast: test_quickfake_amp.py, whose frees at autocast's exit come in an order that changes from run to run)
    Point("sdpa", "reversible", "model", Shape(batch=1, seq_len=512, d_model=64, heads=4, layers=3, kv_heads=2,
                                                rope=True, mlp="swiglu", norm="rmsnorm", optimizer="adamw")),
    Point("full", "checkpoint", "model", Shape(batch=1, seq_len=256, d_model=64, heads=4, layers=2, kv_heads=1,
                                                vocab=128, loss_chunks=2, optimizer="sgd", dtype="bfloat16")),
]


def recorded(point: Point) -> tuple:
    traced = trace_point(point, marks=True)
    return traced.trace, traced.flops, traced.io, traced.reads, traced.peak_bytes


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(FakeTensorMode, "cache", {})  # torch's dispatch cache: what a test puts in stays here
    memo = QuickFakeTensorMode.swap_memo({})
    yield
    QuickFakeTensorMode.swap_memo(memo)


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p.variant}-{p.mode}")
def test_a_quick_fake_run_records_what_a_plain_one_does(point, monkeypatch, fresh_memo):
    quick = recorded(point)
    FakeTensorMode.cache.clear()  # torch's dispatch cache is shared: the plain run computes every op anew
    monkeypatch.setattr(QuickFakeTensorMode, "enabled", False)  # torch's own key and views for every op
    assert recorded(point) == quick


def test_the_memo_answers_repeated_ops(fresh_memo):
    before = QuickFakeTensorMode.quick_hits
    trace_point(POINTS[0], marks=True)
    assert QuickFakeTensorMode.quick_hits > before
    assert QuickFakeTensorMode.memo_size() > 0


def test_mutation_a_quick_key_without_strides_is_caught(monkeypatch, fresh_memo):
    """Two clones of an 8x8 tensor, one transposed: the same quick key if strides were left
    out, so the second clone would get the first one's layout."""
    original = QuickFakeTensorMode.flatten

    def without_strides(self, out, value):
        if type(value).__name__ == "FakeTensor":
            out.extend((value.dtype, value.shape))
            return
        original(self, out, value)

    def layouts():
        with QuickFakeTensorMode():
            x = torch.empty(8, 8)
            return x.clone().stride(), x.t().clone().stride()

    assert layouts() == ((8, 1), (1, 8))
    QuickFakeTensorMode.swap_memo({})
    monkeypatch.setattr(QuickFakeTensorMode, "flatten", without_strides)
    assert layouts() != ((8, 1), (1, 8))


def test_another_torch_gets_plain_fake_tensor_mode(monkeypatch):
    monkeypatch.setattr(FakeTensorMode, "_cache_key", lambda self, state, op, arguments, kw: None)
    assert not quickfake.torch_key_supported()


# --- views through ATen's meta view -------------------------------------------------------------
def _view_cases():
    """(name, make the input from a contiguous (2, 6, 4, 8) fake x, the view's size)."""
    return [
        ("contiguous", lambda x: x, (2, 6, 32)),
        ("infer -1", lambda x: x, (-1, 8)),
        ("one list argument", lambda x: x, [12, 32]),
        ("sliced: an offset", lambda x: x[:, 2:5], (2, 3, 32)),
        ("size-1 dims", lambda x: x[:1], (1, 1, 6, 32)),
        ("stride 0: expanded", lambda x: x[:, :, :1].expand(2, 6, 4, 8), (12, 4, 8)),
        ("permuted, still viewable", lambda x: x.permute(0, 1, 3, 2), (12, 8, 4)),
        ("transposed, split a dim", lambda x: x.transpose(0, 1), (3, 2, 2, 4, 8)),
    ]


def _views(mode_cls, op=torch.ops.aten.view.default) -> list:
    """Each case's view, computed afresh: torch's dispatch cache (shared by every mode) and
    the quick keys emptied first, so neither mode reads what the other one computed."""
    FakeTensorMode.cache.clear()
    QuickFakeTensorMode.swap_memo({})
    out = []
    with mode_cls():
        x = torch.empty(2, 6, 4, 8)
        for name, make, size in _view_cases():
            a = make(x)
            v = op(a, list(size)) if op is torch.ops.aten._unsafe_view.default else a.view(size)
            out.append((name, tuple(v.shape), v.stride(), v.storage_offset(), v.untyped_storage().nbytes(),
                        v.untyped_storage()._cdata == x.untyped_storage()._cdata, v.dtype))
    return out


@pytest.mark.parametrize("op", [torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default],
                         ids=["view", "_unsafe_view"])
def test_quick_views_are_torchs_views(op, fresh_memo):
    assert _views(QuickFakeTensorMode, op) == _views(FakeTensorMode, op)


def test_quick_views_take_the_native_path_and_leave_the_rest_to_torch(monkeypatch, fresh_memo):
    answered = []
    original = quickfake.native_view

    def spy(fake_mode, func, args, kwargs):
        out = original(fake_mode, func, args, kwargs)
        if func is torch.ops.aten.view.default:
            answered.append(out)
        return out

    monkeypatch.setattr(quickfake, "native_view", spy)
    with QuickFakeTensorMode():
        x = torch.empty(2, 6, 4, 8)
        x.view(12, 32)
        torch.empty(0, 4).view(4, 0)  # no elements: torch's path
        with pytest.raises(Exception, match="view"):  # not viewable: torch's own error
            x.transpose(1, 2).view(2, -1)
    assert answered[0] is not None and answered[1] is None and answered[2] is None


# --- view ops natively: their own meta kernel, as torch's path runs it -------------------------
def _native_cases():
    """(name, the view of a (2, 6, 4, 8) fake x, sliced at an offset where it says so)."""
    aten = torch.ops.aten
    return [
        ("t", lambda x: aten.t.default(x[0, 0])), ("transpose", lambda x: x[:, 1:].transpose(1, 3)),
        ("detach", lambda x: x[1:].detach()), ("expand", lambda x: x[:, :, :1].expand(2, 6, 5, 8)),
        ("permute", lambda x: x[:, 2:].permute(3, 0, 2, 1)), ("unsqueeze", lambda x: x[1:].unsqueeze(2)),
        ("alias", lambda x: aten.alias.default(x[:, 3:])),
        ("as_strided", lambda x: x.as_strided((3, 4), (8, 1), 5)), ("view", lambda x: x[1:].view(6, 32)),
    ]


def _native(mode_cls) -> list:
    FakeTensorMode.cache.clear()
    QuickFakeTensorMode.swap_memo({})
    out = []
    with mode_cls():
        x = torch.empty(2, 6, 4, 8, requires_grad=True)
        for name, make in _native_cases():
            v = make(x)
            out.append((name, type(v).__name__, tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, str(v.device),
                        v.untyped_storage()._cdata == x.untyped_storage()._cdata, v.requires_grad, v._is_view()))
    return out


def test_native_views_are_torchs_views(monkeypatch, fresh_memo):
    answered = []
    original = quickfake.native_view
    monkeypatch.setattr(quickfake, "native_view", lambda *a: answered.append(a[1]) or original(*a))
    quick = _native(QuickFakeTensorMode)
    assert {str(op).split(".")[1] for op in answered} >= {"t", "transpose", "detach", "expand", "permute",
                                                           "unsqueeze", "alias", "as_strided", "view"}
    monkeypatch.setattr(QuickFakeTensorMode, "enabled", False)  # torch's own path for every op
    assert quick == _native(FakeTensorMode) == _native(QuickFakeTensorMode)


def test_mutation_a_native_view_at_the_wrong_offset_is_caught(monkeypatch, fresh_memo):
    def at_offset_zero(fake_mode, func, args, kwargs):
        out = original(fake_mode, func, args, kwargs)
        if out is None or func is torch.ops.aten.as_strided.default:
            return out
        return torch.ops.aten.as_strided.default(args[0], out.shape, out.stride(), 0)

    original = quickfake.native_view
    plain = _native(FakeTensorMode)
    monkeypatch.setattr(quickfake, "native_view", at_offset_zero)
    assert _native(QuickFakeTensorMode) != plain


def test_only_ops_torch_runs_through_their_meta_kernel_are_native(monkeypatch):
    """An op torch decomposes in Python for static sizes (squeeze.dim), one with a special fake
    implementation (select, slice) or several outputs (split) keeps torch's path."""
    monkeypatch.setattr(quickfake, "VIEW_CANDIDATES", quickfake.VIEW_CANDIDATES +
                        ("squeeze.dim", "select.int", "slice.Tensor", "split.Tensor", "no_such.op"))
    quickfake.forget_native_views()
    try:
        names = {str(op) for op in quickfake.native_views(QuickFakeTensorMode())}
    finally:
        monkeypatch.undo()
        quickfake.forget_native_views()  # the real candidates again for the next test
    assert "aten.transpose.int" in names and "aten.view.default" in names
    assert not names & {"aten.squeeze.dim", "aten.select.int", "aten.slice.Tensor", "aten.split.Tensor"}


def test_mutation_a_quick_view_without_the_storage_offset_is_caught(monkeypatch, fresh_memo):
    def at_offset_zero(fake_mode, a, shape):
        out = original(fake_mode, a, shape)
        return None if out is None else torch.ops.aten.as_strided.default(a, out.shape, out.stride(), 0)

    original = quickfake.quick_view
    unsafe = torch.ops.aten._unsafe_view.default  # (view itself takes the native path: tested below)
    assert _views(QuickFakeTensorMode, unsafe) == _views(FakeTensorMode, unsafe)
    QuickFakeTensorMode.swap_memo({})
    monkeypatch.setattr(quickfake, "quick_view", at_offset_zero)
    assert _views(QuickFakeTensorMode, unsafe) != _views(FakeTensorMode, unsafe)


def test_every_unsafe_view_is_answered_before_torchs_cache(monkeypatch, fresh_memo):
    """torch's cache never keeps ``_unsafe_view``: each one is asked of quick_view directly
    (no "unsafe view" bypass counted), and turning that off gives torch's path again."""
    calls = []
    original = quickfake.quick_view
    monkeypatch.setattr(quickfake, "quick_view", lambda *a: calls.append(1) or original(*a))

    def three_views():
        before = FakeTensorMode.cache_bypasses.get("unsafe view", 0)
        with QuickFakeTensorMode():
            x = torch.empty(4, 6)
            views = [torch.ops.aten._unsafe_view.default(x, [24]) for _ in range(3)]
        return [(tuple(v.shape), v.stride()) for v in views], FakeTensorMode.cache_bypasses.get("unsafe view", 0) - before

    assert three_views() == ([((24,), (1,))] * 3, 0) and len(calls) == 3
    monkeypatch.setattr(QuickFakeTensorMode, "quick_unsafe_views", False)
    assert three_views() == ([((24,), (1,))] * 3, 3)


def test_entering_attnprofs_fake_mode_asks_no_cuda_device_guard(monkeypatch):
    """torch's __enter__ calls torch._C._ensureCUDADeviceGuardSet(), whose C++ counts CUDA devices
    (cuInit on a GPU: what broke every forked worker on the first real GPU). attnprof's fakes are
    CPU tensors: the call is skipped while the mode enters and put back after, on an exception too."""
    calls = []
    real = torch._C._ensureCUDADeviceGuardSet
    monkeypatch.setattr(torch._C, "_ensureCUDADeviceGuardSet", lambda: calls.append("asked"))
    recorder = torch._C._ensureCUDADeviceGuardSet
    with quickfake.CpuFakeTensorMode():
        x = torch.empty(4, 4)
        assert (x @ x).shape == (4, 4)
    with QuickFakeTensorMode():
        pass
    assert calls == [] and torch._C._ensureCUDADeviceGuardSet is recorder
    with FakeTensorMode() as plain:  # the control: torch's own mode asks (avoid_device_init without a GPU)
        pass
    if plain.avoid_device_init:
        assert calls == ["asked"]

    def broken_enter(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(FakeTensorMode, "__enter__", broken_enter)
    with pytest.raises(RuntimeError, match="boom"):
        quickfake.CpuFakeTensorMode().__enter__()
    assert torch._C._ensureCUDADeviceGuardSet is recorder
    assert real is not recorder


@pytest.mark.parametrize("make", [lambda: torch.ones(2, device="cuda"), lambda: torch.empty(2).to("cuda:0"),
                                  lambda: torch.empty(2).new_zeros(3, device=torch.device("cuda"))],
                         ids=["factory", "to", "new_zeros"])
@pytest.mark.parametrize("mode", [quickfake.CpuFakeTensorMode, QuickFakeTensorMode])
def test_a_tensor_asked_for_on_another_device_is_a_python_error(make, mode):
    """Without the GPU guard, torch makes the fake CUDA tensor, then aborts the whole process
    (std::terminate) when autograd first records it: a plug-in that names "cuda" is refused at once."""
    with mode():
        with pytest.raises(RuntimeError, match="attnprof traces on the CPU, but aten.* on cuda"):
            make()
        assert torch.ones(2, device="cpu").device.type == "cpu"
        assert torch.empty(2, device="meta").device.type == "meta"
