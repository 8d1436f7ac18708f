"""The autocast step (issue 24; measure/workload.py): the forward and the loss under
torch.autocast over float32 parameters, backward outside it; checkpoint and reversible
recompute re-enter autocast as torch.utils.checkpoint does; amp-fp16 scales the loss with
a GradScaler; the tracker names the low-precision parameter copies "autocast_copies"."""

from __future__ import annotations

import pytest
import torch

from attnprof.profiler.measure.autocast_ops import output_dtypes
from attnprof.profiler.measure.drive import trace_point
from attnprof.profiler.measure.accounting import account
from attnprof.profiler.measure.workload import Workload
from attnprof.profiler.records import Point, Shape
from attnprof.scenarios.stack.blocks import REVERSIBLE_REFERENCE, Stack
from attnprof.scenarios.variants.registry import spec_of


def amp(mode: str = "plain", autocast: str = "bfloat16", label: str = "sdpa", layers: int = 2, **kw) -> Point:
    return Point(label, mode, "model", Shape(batch=2, seq_len=64, d_model=32, heads=4, layers=layers,
                                             autocast=autocast), **kw)


def gradients(point: Point, seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    work = Workload(point)
    work.step()
    return work, [t.grad.clone() for t in work.params + work.inputs if t.grad is not None]


def test_the_forward_runs_as_a_hand_written_autocast_step():
    """The dense reference: the same module and input, autocast written out by hand."""
    point = amp()
    work, grads = gradients(point)
    assert all(p.dtype == torch.float32 for p in work.params) and all(g.dtype == torch.float32 for g in grads)
    torch.manual_seed(0)
    ref = Workload(point)  # the same parameters and input (same seed)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = (ref.module(ref.inputs[0]) * ref.dout).sum()
    loss.backward()
    assert all(torch.equal(a, b.grad) for a, b in zip(grads, ref.params + ref.inputs))
    torch.manual_seed(0)
    fp32 = Workload(amp(autocast=""))
    fp32.step()
    assert not torch.equal(grads[0], fp32.params[0].grad)  # autocast changed the math


@pytest.mark.parametrize("mode", ["checkpoint", "reversible"])
def test_recomputation_reenters_autocast(mode):
    """Backward's recompute runs in bfloat16 as the forward did: the weights are cast again
    and the recomputed linear layers (addmm: forward only) are bfloat16. torch.utils.checkpoint
    re-enters the forward's autocast state itself; the reversible stack does it (ReplayAutocast)."""
    found = output_dtypes(trace_point(amp(mode)))
    assert "bfloat16" in found[("bwd", "_to_copy.default")]  # the weights cast again in backward
    assert found[("bwd", "addmm.default")] == ["bfloat16"]  # the recomputed forward, in bfloat16
    assert ("bwd", "addmm.default") not in output_dtypes(trace_point(amp("plain")))  # plain recomputes nothing


def test_checkpoint_gradients_equal_the_plain_stacks_under_autocast():
    _, plain = gradients(amp("plain"))
    _, again = gradients(amp("checkpoint"))
    assert len(plain) == len(again) and all(torch.equal(a, b) for a, b in zip(plain, again))


def test_reversible_gradients_match_ordinary_autograd_under_autocast():
    work, saving = gradients(amp("reversible"))
    reference = Stack(spec_of(work.point), work.point.shape, REVERSIBLE_REFERENCE)  # every activation stored
    reference.load_state_dict(work.module.state_dict())
    x = work.inputs[0].detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = (reference(x) * work.dout).sum()
    loss.backward()
    expected = [p.grad for p in reference.parameters()] + [x.grad]
    assert len(expected) == len(saving)
    for a, b in zip(saving, expected):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)  # bf16 recompute vs bf16 forward


def test_amp_fp16_scales_the_loss_with_a_grad_scaler():
    work, scaled = gradients(amp(autocast="float16"))
    scale = work.scaler.get_scale()
    assert scale > 1
    torch.manual_seed(0)
    ref = Workload(amp(autocast="float16"))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = (ref.module(ref.inputs[0]) * ref.dout).sum()
    (loss * scale).backward()
    expected = [t.grad for t in ref.params + ref.inputs if t.grad is not None]
    assert len(expected) == len(scaled)
    for a, b in zip(scaled, expected):  # fp16 gradients at a 2**16 scale may overflow: inf/nan, as in training
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert Workload(amp(autocast="bfloat16")).scaler is None  # bfloat16 needs no loss scaling


def test_the_breakdown_separates_float32_parameters_from_their_bfloat16_copies():
    point = amp("checkpoint")
    acc = account(point, fake=True)
    work = Workload(point, "meta")
    params = sum(p.numel() for p in work.params)
    assert acc.breakdown_bytes["parameters"] == 4 * params  # the fp32 parameters, untouched
    copies = [t for t in acc.largest_at_peak if t["category"] == "autocast_copies"]
    assert acc.breakdown_bytes["autocast_copies"] > 0
    assert all(t["op"] == "_to_copy.default" and t["dtype"] == "bfloat16" for t in copies)
    assert acc.breakdown_bytes["autocast_copies"] <= 2 * params  # at most one bf16 copy of each


def test_without_autocast_nothing_is_an_autocast_copy():
    assert account(amp("plain", autocast=""), fake=True).breakdown_bytes.get("autocast_copies", 0) == 0
