"""Scope attention with grouped KV heads (issue 24): profiler/measure/workload.py builds k
and v with K heads, so --kv-heads 1 against --kv-heads H changes the input bytes, and the
K/V gradient bytes, by exactly 2 tensors x B x (H - 1) x n x dh x itemsize each; the
record says how K/V reached the query heads (kv_repeat)."""

import pytest
import torch

from attnprof.profiler.measure.workload import Workload, kv_repeat
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point, Shape

B, H, N, D = 2, 4, 64, 32  # head_dim 8
LABELS = ["full", "sdpa", "talking_heads", "sparse_strided", "sparse_fixed[summary=4]"]


def point(label: str, kv_heads: int, dtype: str = "float32") -> Point:
    return Point(label, "none", "attention", Shape(batch=B, seq_len=N, d_model=D, heads=H, kv_heads=kv_heads,
                                                   dtype=dtype))


def closed_form(itemsize: int) -> int:
    return 2 * B * (H - 1) * N * (D // H) * itemsize  # k and v, (H - 1) heads fewer


def bytes_of(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


@pytest.mark.parametrize("dtype,itemsize", [("float32", 4), ("float64", 8)])
@pytest.mark.parametrize("label", LABELS)
def test_inputs_and_kv_gradients_shrink_by_the_closed_form(label, dtype, itemsize):
    sizes = {}
    for kv in (1, H):
        work = Workload(point(label, kv, dtype))
        q, k, v = work.inputs
        assert k.shape == v.shape == (B, kv, N, D // H) and q.shape == (B, H, N, D // H)
        work.step()
        sizes[kv] = (bytes_of(work.inputs), bytes_of([k.grad, v.grad]), q.grad.shape)
    assert sizes[H][0] - sizes[1][0] == closed_form(itemsize)
    assert sizes[H][1] - sizes[1][1] == closed_form(itemsize)
    assert sizes[H][2] == sizes[1][2]  # the query gradient is unchanged


@pytest.mark.parametrize("label", LABELS)
def test_the_predicted_input_bytes_shrink_by_the_closed_form(label):
    inputs = {kv: predict(point(label, kv)).breakdown_bytes["inputs"] for kv in (1, H)}
    assert inputs[H] - inputs[1] == closed_form(4)


def test_kv_heads_zero_is_heads_byte_for_byte():
    a, b = predict(point("full", 0)), predict(point("full", H))
    assert (a.peak_bytes, a.breakdown_bytes) == (b.peak_bytes, b.breakdown_bytes)


def test_the_record_says_how_kv_reached_the_query_heads():
    from attnprof.profiler.predict.points import prediction_record
    from attnprof.scenarios.variants.sdpa import HAS_ENABLE_GQA

    assert prediction_record(point("full", 1))["kv_repeat"] == "repeat"
    assert prediction_record(point("sdpa", 2))["kv_repeat"] == ("enable_gqa" if HAS_ENABLE_GQA else "repeat")
    assert prediction_record(point("sdpa", 0))["kv_repeat"] == kv_repeat(point("sdpa", H)) == ""


def test_lsh_keeps_one_shared_qk_input():
    work = Workload(Point("lsh[bucket_size=16]", "none", "attention",
                          Shape(batch=1, seq_len=64, d_model=D, heads=H, rope=True)))
    assert len(work.inputs) == 2
    work.step()
    assert all(t.grad is not None and t.grad.shape == t.shape and torch.isfinite(t.grad).all() for t in work.inputs)
