"""Rule 4 of cuda_ops (profiler/memmodel/cuda_norm_backward.py): a norm backward over more than
65,536 rows of a narrow norm sums its weight's gradient in partial-sum buffers on CUDA; the
closed forms of LaunchGammaBetaBackwardCUDAKernel's branch, and the events on traced runs."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.hardware.gpus import get_gpu
from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.profiler.memmodel.cuda_norm_backward import partial_rows
from attnprof.profiler.memmodel.cuda_ops import ALLOC, FREE, OP, apply
from attnprof.scenarios.stack.cuda_rms_norm import CudaRMSNorm

H200, A100 = get_gpu("h200"), get_gpu("a100-80gb")


def test_the_branch_and_the_buffer_rows_follow_the_kernel():
    """M > 64K and N / 32 < sm_count / 2 (integer divisions); blocks.y = min(32768 / ceil(N / 32),
    ceil(M / 32))."""
    assert H200.sm_count == 132 and A100.sm_count == 108
    assert partial_rows(65536, 1024, 132) == 0  # not more than 64K rows
    assert partial_rows(65537, 1024, 132) == min(32768 // 32, -(-65537 // 32)) == 1024
    assert partial_rows(131072, 2048, 132) == 32768 // 64 == 512  # 2048 / 32 = 64 < 66
    assert partial_rows(131072, 2111, 132) == 32768 // 66  # 65 < 66, blocks.x = 66
    assert partial_rows(131072, 2112, 132) == 0  # 66 is not < 66
    assert partial_rows(131072, 1728, 108) == 0 and partial_rows(131072, 1727, 108) == 32768 // 54
    assert partial_rows(70000, 64, 132) == -(-70000 // 32)  # few columns: one block row per 32 rows


def _traced(make_norm, rows: int, n: int, dtype=torch.bfloat16):
    with FakeTensorMode():
        x = torch.randn(rows, n, dtype=dtype, requires_grad=True)
        norm = make_norm(n, dtype)
        with MemoryTracker(trace=True) as t:
            t.track([x, *norm.parameters()], "inputs")
            norm(x).backward(torch.randn(rows, n, dtype=dtype))
    return t.trace


def _op_events(events, name):
    i = next(i for i, e in enumerate(events) if e[0] == OP and e[1].startswith(name))
    j = next((j for j in range(i + 1, len(events)) if events[j][0] == OP), len(events))
    return events[i + 1:j]


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_a_long_norm_backward_sums_its_weight_gradient_in_partial_buffers(kind):
    """dX; the first dgamma (and dbeta); the partial buffers; each column sum's result (the serial
    the trace returns), its staging buffer, then the first gradient freed; the buffers freed last."""
    layer = kind == "layernorm"
    make = (lambda n, dt: torch.nn.LayerNorm(n, dtype=dt)) if layer else \
        (lambda n, dt: CudaRMSNorm(torch.nn.RMSNorm(n, dtype=dt)))
    rows, n = 70000, 64
    name = "native_layer_norm_backward" if layer else "_fused_rms_norm_backward"
    events = _traced(make, rows, n)
    before = [e for e in _op_events(events, name) if e[0] == ALLOC]
    after = _op_events(apply(events, H200).events, name)
    grads = 2 if layer else 1
    assert len(before) == 1 + grads and before[0][2] == rows * n * 2
    buffer = partial_rows(rows, n, H200.sm_count) * n * 2
    allocs = [e for e in after if e[0] == ALLOC]
    assert allocs[0] == before[0]  # dX first, as the CPU op made it
    firsts = allocs[1:1 + grads]
    assert [e[2] for e in firsts] == [n * 2] * grads and all(str(e[1]).startswith("cuda.") for e in firsts)
    assert [e[2] for e in allocs[1 + grads:1 + 2 * grads]] == [buffer] * grads
    returned = [e for e in allocs if not str(e[1]).startswith("cuda.")]
    assert returned == before  # the traced gradients are the column sums' results, same serials and sizes
    frees = [e[1] for e in after if e[0] == FREE and str(e[1]).startswith("cuda.")]  # (not the op's inputs')
    partials = [e[1] for e in allocs[1 + grads:1 + 2 * grads]]
    assert frees[-grads:] == list(reversed(partials))  # freed on return, dbeta's buffer first
    for first in firsts:  # each first gradient freed right after its replacement exists
        assert after.index((FREE, first[1])) > after.index(next(e for e in returned if e[2] == first[2]))
    assert sum(e[2] for e in allocs) - sum(e[2] for e in before) > grads * buffer  # staging buffers too


@pytest.mark.parametrize("rows, n, gpu", [(65536, 64, H200), (70000, 4096, H200)])
def test_short_or_wide_norms_and_no_gpu_are_left_as_traced(rows, n, gpu):
    events = _traced(lambda n, dt: torch.nn.LayerNorm(n, dtype=dt), rows, n)
    assert apply(events, gpu).events == apply(events).events
    assert "native_layer_norm_backward" not in apply(events, gpu).rewritten


def test_without_weight_gradients_no_buffer_is_made():
    def frozen(n, dt):
        norm = torch.nn.LayerNorm(n, dtype=dt)
        norm.requires_grad_(False)
        return norm

    events = _traced(frozen, 70000, 64)
    assert "native_layer_norm_backward" not in apply(events, H200).rewritten
