"""The ops whose CUDA kernel allocates differently from the CPU op (profiler/memmodel/cuda_ops.py),
each rule on a tiny traced run, so that it can fail."""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.profiler.memmodel.cuda_ops import ALLOC, FREE, OP, apply


def _trace(run, *tensors):
    with MemoryTracker(trace=True) as t:
        t.track(list(tensors), "inputs")
        run()
    return t.trace


def _outputs(events, op):
    """The ALLOC events right after the first OP named ``op``."""
    i = next(i for i, e in enumerate(events) if e[0] == OP and e[1].split(".")[0] == op)
    out = []
    for e in events[i + 1:]:
        if e[0] != ALLOC:
            break
        out.append(e)
    return out


def test_layer_norm_stats_are_float32_on_cuda_for_a_half_input():
    """layer_norm_cuda: mean and rstd in the CUDA accumulate type (float32 for bf16/fp16);
    the CPU op keeps them in the input's dtype. Y is unchanged."""
    for dtype, cpu_el, cuda_el in ((torch.bfloat16, 2, 4), (torch.float16, 2, 4), (torch.float32, 4, 4)):
        with FakeTensorMode():
            x = torch.randn(3, 40, 16, dtype=dtype, requires_grad=True)
            norm = torch.nn.LayerNorm(16, dtype=dtype)
            events = _trace(lambda: norm(x).sum().backward(), x)
        y, mean, rstd = _outputs(events, "native_layer_norm")
        assert mean[2] == rstd[2] == 120 * cpu_el  # M = 3 x 40 rows, on the CPU
        y2, mean2, rstd2 = _outputs(apply(events).events, "native_layer_norm")
        assert y2 == y and mean2[2] == rstd2[2] == 120 * cuda_el, dtype
        assert (mean2[1], rstd2[1]) == (mean[1], rstd[1])  # the same storages, freed where they were


def test_softmax_backward_holds_grad_times_output_after_its_output():
    """softmax_backward_cuda_out: ``tmp = grad * output`` (grad's size) after grad_input,
    freed on return: one more [B, H, n, n] at that moment, none afterwards."""
    with FakeTensorMode():
        s = torch.randn(2, 4, 32, 32, dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(2, 4, 32, 32, dtype=torch.bfloat16)
        events = _trace(lambda: s.softmax(-1).backward(dout), s, dout)
    out = apply(events)
    assert out.rewritten == {"_softmax_backward_data": 1}
    i = next(i for i, e in enumerate(out.events) if e[0] == OP and e[1].startswith("_softmax_backward_data"))
    grad_input, tmp, freed = out.events[i + 1:i + 4]
    assert grad_input[0] == ALLOC and grad_input[2] == 2 * 4 * 32 * 32 * 2
    assert tmp[0] == ALLOC and tmp[2] == grad_input[2] and freed == (FREE, tmp[1])
    assert len(out.events) == len(events) + 2
    assert apply([e for e in events]).events == out.events  # the input list is left as it was


def test_softmax_backward_tmp_takes_the_promoted_dtype():
    """half_to_float: an fp32 gradient of a half softmax; grad * output is fp32."""
    with FakeTensorMode():
        s = torch.randn(1, 2, 8, 8, dtype=torch.float16, requires_grad=True)
        events = _trace(lambda: F.softmax(s, -1, dtype=torch.float32).sum().backward(), s)
    out = apply(events)
    tmps = [e for e in out.events if e[0] == ALLOC and str(e[1]).startswith("cuda.softmax_backward_tmp")]
    assert len(tmps) == 1 and tmps[0][2] == 1 * 2 * 8 * 8 * 4


def test_other_ops_and_undescribed_ops_are_left_alone():
    with FakeTensorMode():
        s = torch.randn(2, 8, 8, requires_grad=True)
        events = _trace(lambda: F.log_softmax(s, -1).sum().backward(), s)  # log_softmax: no temporary
    assert apply(events).events == events
    bare = [(OP, "_softmax_backward_data.default", None), (ALLOC, 7, 64, "_softmax_backward_data.default")]
    assert apply(bare).events == bare  # no tensor arguments described: nothing to go on


def _reduce_events(events):
    return [e for e in events if e[0] == ALLOC and str(e[1]).startswith("cuda.reduce_")]


def test_a_column_sum_takes_the_reduction_kernels_staging_buffer_on_a_gpu():
    """Rule 3: a bias gradient's sum over rows (dims from the traced scalars) gets Reduce.cuh's
    staging buffer and semaphores after its output, freed at once; only when the GPU is known."""
    from attnprof.profiler.hardware.gpus import get_gpu

    with FakeTensorMode():
        g = torch.randn(8192, 1024, dtype=torch.bfloat16)
        events = _trace(lambda: (g.sum(0), g.sum(-1), g.sum()), g)
    assert _reduce_events(apply(events).events) == []  # no GPU: no rule 3
    out = apply(events, get_gpu("h200"))
    assert out.rewritten.get("sum") == 2  # the column sum, and the whole sum; the row sum needs none
    first = [e for e in out.events if e[0] in (ALLOC, FREE) and "reduce" in str(e[1])][:4]
    assert [e[0] for e in first] == [ALLOC, ALLOC, FREE, FREE]
    assert first[0][2] == 8192 * 8192  # 4 * 1024 outputs * 128 CTAs * 32 * 4: an (n, 4d) bf16 tensor
    assert first[1][2] == 32  # one int per grid column (8)
    i = out.events.index(first[0])
    assert out.events[i - 1][0] == ALLOC and out.events[i - 2][0] == OP  # after the sum's output


def test_a_mean_over_the_rows_is_a_reduction_too():
    from attnprof.profiler.hardware.gpus import get_gpu

    with FakeTensorMode():
        x = torch.randn(4096, 1024)
        events = _trace(lambda: x.mean(dim=0), x)
    assert [e[2] for e in _reduce_events(apply(events, get_gpu("h200")).events)] == [4096 * 8192, 32]


def test_negative_dims_count_and_a_reduction_into_another_dtype_is_not_claimed():
    from attnprof.profiler.hardware.gpus import get_gpu

    with FakeTensorMode():
        g = torch.randn(4096, 1024)
        events = _trace(lambda: (g.sum(-2), g.sum(0, dtype=torch.float64)), g)
    sums = [e for e in events if e[0] == OP and e[1].startswith("sum")]
    assert sums[1][2]["kwargs"] == {"dtype": "float64"} and sums[0][2]["scalars"] == [None, (-2,)]
    out = apply(events, get_gpu("h200"))
    assert [e[2] for e in _reduce_events(out.events)] == [4096 * 8192, 32]  # the first only


def test_native_dropout_allocates_its_mask_before_its_output():
    """dropout_cuda (Dropout.cu): the bool mask, then the output; the trace has them as returned."""
    from attnprof.profiler.measure.cuda_branches import cuda_branches

    with FakeTensorMode(), cuda_branches():
        w = torch.randn(2, 4, 32, 32, dtype=torch.bfloat16, requires_grad=True)
        events = _trace(lambda: F.dropout(w, 0.1, True).sum().backward(), w)
    output, mask = _outputs(events, "native_dropout")
    assert (output[2], mask[2]) == (2 * 4 * 32 * 32 * 2, 2 * 4 * 32 * 32)
    out = apply(events)
    assert out.rewritten == {"native_dropout": 1}
    assert _outputs(out.events, "native_dropout") == [mask, output]
    assert sorted(map(str, out.events)) == sorted(map(str, events))  # the same events, reordered


def test_native_dropout_outside_dropout_cudas_case_is_left_in_order():
    """Evaluation (clone, then a ones mask) and p == 1 allocate the output first on CUDA too."""
    for p, train in ((0.5, False), (1.0, True)):
        with FakeTensorMode():
            w = torch.randn(4, 32, dtype=torch.bfloat16)
            events = _trace(lambda: torch.ops.aten.native_dropout(w, p, train), w)
        assert apply(events).rewritten == {}, (p, train)
