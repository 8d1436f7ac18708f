"""torch.autocast as CUDA casts (profiler/measure/cuda_autocast.py, issue 39), held to the running
torch's own AutocastCUDA kernels: a forward on fake CUDA tensors runs them without a GPU. The same
ops and dtypes as CUDA's autocast, which differ from the CPU's; the weight cache; the CPU's lists
back after the context; and a GPU's amp step predicted exactly on every path."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from dispatched_ops import DispatchedOps
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure import cuda_autocast as cuda_autocast_module
from attnprof.profiler.measure.cuda_autocast import (BANNED_MESSAGE, NOT_EMULATED, POLICIES, cuda_autocast,
                                                     cuda_policy_ops)
from attnprof.profiler.measure.device_kernels import on_device
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape


def _cases(dev: str, low: torch.dtype) -> dict:
    bf = lambda *s: torch.randn(*s, device=dev, dtype=low)  # noqa: E731 (fake: no values)
    f32 = lambda *s: torch.randn(*s, device=dev)  # noqa: E731
    long = lambda *s: torch.zeros(*s, dtype=torch.long, device=dev)  # noqa: E731
    return {  # the ops attnprof's variants, stack, LM head and loss run, and one of each policy
        "softmax": lambda: torch.softmax(bf(2, 4, 8), -1), "log_softmax": lambda: F.log_softmax(bf(4, 8), -1),
        "bmm": lambda: torch.bmm(f32(2, 4, 8), bf(2, 8, 4)), "mm": lambda: torch.mm(f32(4, 8), f32(8, 4)),
        "einsum": lambda: torch.einsum("bhid,bhjd->bhij", f32(1, 2, 4, 8), bf(1, 2, 4, 8)),
        "matmul": lambda: torch.matmul(bf(2, 4, 8), f32(8, 4)), "linear": lambda: F.linear(bf(4, 8), f32(3, 8), f32(3)),
        "exp": lambda: torch.exp(bf(4)), "sum": lambda: bf(4, 4).sum(), "sum_dim": lambda: bf(4, 4).sum(0),
        "mean": lambda: bf(4, 4).mean(0), "layer_norm": lambda: F.layer_norm(bf(4, 8), (8,)),
        "rms_norm": lambda: F.rms_norm(bf(4, 8), (8,)), "logsumexp": lambda: torch.logsumexp(bf(4, 8), 0),
        "addcmul": lambda: torch.addcmul(bf(4), f32(4), bf(4)), "gelu": lambda: F.gelu(bf(4)),
        "sdpa": lambda: F.scaled_dot_product_attention(f32(1, 2, 8, 4), f32(1, 2, 8, 4), bf(1, 2, 8, 4)),
        "cross_entropy": lambda: F.cross_entropy(bf(4, 10), long(4)), "pow": lambda: bf(4).pow(2),
        "norm": lambda: torch.norm(bf(4)), "cumsum": lambda: bf(4).cumsum(0), "rsqrt": lambda: torch.rsqrt(f32(4)),
        "norm_dim": lambda: torch._VF.norm(bf(4, 8), 2, [1]), "norm_except_dim": lambda: torch.norm_except_dim(bf(4, 8), 2, 0),
    }


def _run(device: str, context, low=torch.bfloat16) -> dict:
    out = {}
    with FakeTensorMode():
        cases = _cases(device, low)
        for name, case in cases.items():
            with context(), DispatchedOps() as ops:
                case()
            out[name] = ops.seen
    return out


def _cuda_autocast(low=torch.bfloat16):
    """The binary's own AutocastCUDA kernels, switched on directly (torch.autocast("cuda") refuses
    without a GPU)."""
    class On:
        def __enter__(self):
            self.before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", low)

        def __exit__(self, *exc):
            torch.set_autocast_enabled("cuda", self.before[0])
            torch.set_autocast_dtype("cuda", self.before[1])
            torch.clear_autocast_cache()
    return On()


def _cpu_autocast(low=torch.bfloat16):
    return torch.autocast("cpu", dtype=low)


class _Emulated:
    def __init__(self, low=torch.bfloat16):
        self.low = low

    def __enter__(self):
        self.stack = [cuda_autocast(), _cpu_autocast(self.low)]
        for c in self.stack:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.stack):
            c.__exit__(*exc)


def test_every_op_cuda_autocast_registers_has_its_policy():
    registered = {n.split("::", 1)[1] for n in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")
                  if n.startswith("aten::")}
    assert registered and registered - set(POLICIES) - set(NOT_EMULATED) == set()


def test_an_op_the_running_torchs_cuda_lists_leave_out_keeps_no_policy(monkeypatch):
    """The CUDA lists change across releases (rms_norm: float32 in torch 2.13, not listed in 2.11):
    the emulation follows the running torch's AutocastCUDA registrations, not POLICIES alone."""
    cuda = cuda_autocast_module.registered("AutocastCUDA") - {"rms_norm", "exp"}
    real = cuda_autocast_module.registered
    monkeypatch.setattr(cuda_autocast_module, "registered", lambda key: cuda if key == "AutocastCUDA" else real(key))
    ops = cuda_policy_ops()
    assert ops.get("rms_norm") is None and ops.get("exp") is None and ops["softmax.int"] == "fp32_set_opt_dtype"
    with FakeTensorMode():
        x = torch.randn(4, 8, dtype=torch.bfloat16)
        with cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.exp(x).dtype == torch.bfloat16  # listed: float32 (the emulation test above)
            assert torch.softmax(x, -1).dtype == torch.float32


def _result_dtype(seen: list) -> str:
    return seen[-1][1][0]  # the last op's first output: the case's result


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_emulation_runs_the_ops_and_dtypes_cuda_autocast_runs(low):
    """Op by op, below autocast and autograd: the same ops, casts and output dtypes as the binary's
    AutocastCUDA kernels, where the CPU's autocast differs on many (so the comparison can fail).
    In float16 CUDA's softmax takes the half input whole (half_to_float): no float32 copy."""
    cuda = _run("cuda", lambda: _cuda_autocast(low), low)
    emulated, cpu = _run("cpu", lambda: _Emulated(low), low), _run("cpu", lambda: _cpu_autocast(low), low)
    differ = {"softmax", "log_softmax", "exp", "sum", "layer_norm", "logsumexp", "pow", "cumsum", "rms_norm"}
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_rms_norm", "CUDA"):
        # a CUDA build runs RMSNorm's fused kernel below autocast (the stack's modules follow it:
        # scenarios/stack/cuda_rms_norm.py), a CPU build the composite: the result's dtype compared
        assert _result_dtype(emulated.pop("rms_norm")) == _result_dtype(cuda.pop("rms_norm"))
        cpu.pop("rms_norm")
        differ.discard("rms_norm")
    # SDPA's kernel is the device's own (the CPU's flash kernel; on fake CUDA tensors the math path,
    # which casts inside): autocast's two casts of the float32 q and k compared
    casts = lambda seen: [op for op in seen if op[0].startswith("_to_copy")][:2]  # noqa: E731
    assert casts(emulated.pop("sdpa")) == casts(cuda.pop("sdpa")) == [("_to_copy.default", (str(low),))] * 2
    assert emulated == cuda
    assert {name for name in cuda if cpu[name] != cuda[name]} >= differ
    if low == torch.float16:
        assert not any(op.startswith("_to_copy") for op, _ in cuda["softmax"][1:])


def test_the_cpu_lists_are_back_after_the_context():
    before = _run("cpu", _cpu_autocast)
    with cuda_autocast():
        pass
    assert _run("cpu", _cpu_autocast) == before


def test_a_weight_is_cast_once_per_region_as_autocast_caches_it():
    w = torch.randn(3, 8, requires_grad=True)
    x = torch.randn(4, 8)
    with cuda_autocast():
        with DispatchedOps() as ops, torch.autocast("cpu", dtype=torch.bfloat16):
            F.linear(x, w)
            F.linear(x, w)
        with DispatchedOps() as again, torch.autocast("cpu", dtype=torch.bfloat16):
            F.linear(x, w)
    casts = lambda seen: sum(1 for name, _ in seen if name.startswith("_to_copy"))  # noqa: E731
    assert casts(ops.seen) == 3  # the weight once, the input twice (not a leaf that requires grad: not cached)
    assert casts(again.seen) == 2  # a new region casts the weight again
    with cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            F.linear(x, w)  # cached with grad on, as cached_cast does: the later use still reaches w
        y = F.linear(x, w)
    assert y.grad_fn is not None


def test_an_op_cuda_autocast_refuses_is_refused():
    with cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError) as err:
        F.binary_cross_entropy(torch.rand(4), torch.rand(4))
    assert str(err.value) == BANNED_MESSAGE


@pytest.mark.parametrize("variant, low", [("full", "bfloat16"), ("lsh", "bfloat16"), ("full", "float16")])
@pytest.mark.parametrize("mode", ["plain", "checkpoint"])
def test_a_gpus_amp_step_is_predicted_exactly_and_holds_cudas_float32_softmax(variant, low, mode):
    """amp for a GPU: every prediction path equals the full fake run; the softmax of the scores is
    float32 (CUDA's list), so the step holds more than the CPU's autocast says."""
    point = Point(variant, mode, "model", Shape(seq_len=128, d_model=32, heads=2, layers=5, autocast=low))
    gpu = on_device(point, "cuda")
    assert predict(gpu).peak_bytes == account(gpu, fake=True).peak_bytes
    assert predict(gpu).peak_bytes > predict(point).peak_bytes
    with FakeTensorMode():
        from attnprof.profiler.measure.workload import Workload
        from attnprof.profiler.measure.drive import drive
        from attnprof.profiler.measure.tracker import MemoryTracker

        work = Workload(gpu, "cpu")
        with MemoryTracker() as tracker, DispatchedOps() as ops:
            drive(work, tracker)
    softmax = [dtypes for name, dtypes in ops.seen if name.startswith("_softmax.")]
    assert softmax and all(d == ("torch.float32",) for d in softmax)
