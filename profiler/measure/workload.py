"""Build the module and inputs of a point, and run its forward and backward.

Prediction (fake tensors) and measurement (real tensors) both go through here, so the
two run exactly the same ops and their tensor peaks can be compared byte for byte.

The upstream gradient is real, never ``out.sum().backward()``: that hands autograd an
expanded scalar (no memory of its own, ../shared/NOTES.md), and at scope model, after
the stack's final LayerNorm at default weights, the sum's input gradient is zero by
construction. ``dout``, random, of the output's shape and dtype, is made with the inputs
before the forward and counted with them (docs/accounting.md):

- scope attention: backward runs from it, as a kernel benchmark does
  (``out = core(q, k, v); out.backward(dout)``, the output alive meanwhile);
- scope model: it is the fixed random projection of the loss ``(out * dout).sum()``, as a
  model's head would consume the output: the output is freed after the forward (the
  product saves only ``dout``), and backward's first step makes one [B, n, d_model]
  gradient (1 x ``dout``), freed once the final LayerNorm's backward has used it.

A forward-only point has no ``dout`` and no loss.

With a vocabulary (``Shape.vocab`` > 0, scope model) the inputs are token ids and target
ids, (B, n) int64 each, and the loss is the LM head's fp32 cross-entropy
(scenarios/stack/lm_head.py): no ``dout``, backward starts from the real loss. A
forward-only point then computes the loss too (as an evaluation step does).

At scope attention a variant whose blocks alternate (``layer_period() = p > 1``, the
interleaved Sparse Transformer) runs one core of each of its p layer kinds on the same
q, k, v and sums their outputs, so every kind is measured; the record says so
(``scope_note``).
"""

from __future__ import annotations

import contextlib
from functools import partial

import torch
from torch import nn

from attnprof.profiler.measure.cuda_autocast import cuda_autocast
from attnprof.profiler.measure.cuda_branches import cuda_branches
from attnprof.profiler.measure.optimizer import build as build_optimizer  # issue 24: optimizer
from attnprof.profiler.measure.optimizer import states as optimizer_states
from attnprof.errors import UserError
from attnprof.profiler.forks import checkpoints_ask_no_device
from attnprof.profiler.records import Point
from attnprof.scenarios.variants.registry import spec_of
from attnprof.scenarios.stack.blocks import Stack
from attnprof.scenarios.stack.cuda_rms_norm import use_cuda_kernels
from attnprof.scenarios.stack.lm_head import token_batch


@contextlib.contextmanager
def cuda_step(autocast: bool):
    """Where a CUDA step's ops differ from the CPU's above the kernels (issue 39): the composites'
    CUDA branches (measure/cuda_branches.py), and CUDA's autocast lists when ``autocast``."""
    with cuda_branches(), (cuda_autocast() if autocast else contextlib.nullcontext()):
        yield


@contextlib.contextmanager
def _building(device: torch.device, dtype: torch.dtype):
    """Create parameters directly on the device and in the dtype. (Module.to() would
    swap fake parameters, which fails once FakeTensorMode holds weak references.)"""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            yield
    finally:
        torch.set_default_dtype(previous)


def scope_note(point: Point) -> str:
    """What a record of this point must say about how it was measured, or ''."""
    if point.scope != "attention":
        return ""
    period = spec_of(point).layer_period()
    if period == 1:
        return ""
    return (f"scope attention: one core of each of the {period} alternating layer kinds (layer_index 0..{period - 1}) "
            f"on the same q, k, v, outputs summed; figures cover {period} attention layers")


def kv_repeat(point: Point) -> str:
    """How the point's K/V heads reach its query heads (issue 24): "enable_gqa" (SDPA's
    own), "repeat" (Llama's repeat_kv, a copy per query head), or "" (as many heads)."""
    return spec_of(point).kv_repeat(point.shape.heads, point.shape.kv_heads)


def _one_period(layers: nn.ModuleList, q, k, v) -> torch.Tensor:
    """Every layer kind's attention (RoPE and K/V repeat included: ``attend``) on the same
    q, k, v, outputs summed: (B, h, n, dh)."""
    out = layers[0].attend(q, k, v)  # (B, h, n, dh)
    for layer in layers[1:]:
        out = out + layer.attend(q, k, v)  # (B, h, n, dh)
    return out


# --- issue 24: precision ---
def mixed_precision(point: Point, device: torch.device) -> tuple:
    """(a context for the forward, a GradScaler or None) of the point's ``Shape.autocast``.

    amp-*: ``torch.autocast(device_type, dtype)`` over the float32 parameters, as torch.amp
    training runs the forward and the loss; backward runs outside it (torch's advice), and
    whatever autocast keeps in float32 is the running torch's own lists (traced:
    profiler/measure/autocast_ops.py). Its weight cache (the low-precision casts of the
    parameters, kept until the autocast region exits) is live memory the tracker sees.

    amp-fp16 with a backward at scope model: a ``torch.amp.GradScaler`` multiplies the loss by
    its scale (``scaler.scale(loss)``) before backward, so every gradient is scaled. Its scale
    and growth tracker exist before the step (made here by scaling a zero, public API only):
    the measured step is a later one. Unscaling the gradients (``scaler.unscale_`` /
    ``scaler.step``) belongs to an optimizer step: ``scaler`` is there for it."""
    if not point.shape.autocast:
        return contextlib.nullcontext, None
    dtype = getattr(torch, point.shape.autocast)
    scaler = None
    if point.shape.autocast == "float16" and point.scope == "model" and not point.forward_only:
        scaler = torch.amp.GradScaler(device.type)
        scaler.scale(torch.zeros((), device=device))  # its scale and growth tracker, made before the step
    return (lambda: torch.autocast(device.type, dtype=dtype)), scaler
def lm_problem(point: Point) -> str:
    """Why the language-model fields make no sense for this point (issue 24), or ''."""
    s = point.shape
    if s.vocab and point.scope == "attention":
        return f"vocab {s.vocab} needs scope model (an embedding, a head and a loss around the stack), not attention"
    if not s.vocab and (s.loss_chunks != 1 or s.tie_embeddings):
        return "loss_chunks and tie_embeddings need a vocabulary (vocab > 0)"
    return ""


class Workload:
    """A point made concrete on a device: ``spec`` (its parsed variant), ``params``, ``inputs``,
    ``dout``, ``forward()``, ``backward()``."""

    def __init__(self, point: Point, device: str | torch.device = "cpu", *, impl_device: str = ""):
        self.point = point
        self.lm_scope = lambda on: None  # issue 24: peak split; drive sets it to name the head's storages
        self.leaving_autocast = lambda: None  # issue 24: drive's marks set it (see _leaving)
        self.spec = spec = spec_of(point)  # the point's parsed variant (parsed here only for a hand-built point)
        shape = point.shape
        spec.check_shape(shape.seq_len, shape.heads, shape.head_dim)
        device, dtype = torch.device(device), shape.torch_dtype
        grad = not point.forward_only
        b, n, d, h, dh = shape.batch, shape.seq_len, shape.d_model, shape.heads, shape.head_dim
        problem = lm_problem(point)
        if problem:
            raise UserError(problem)
        # issue 39: whose kernels the step follows (Point.kernels, or ``impl_device``: the GPU model's
        # trace); a CPU run of a GPU's step swaps in the ops CUDA runs where the module cannot tell
        self.impl_device = impl_device or point.kernels or device.type
        if point.scope == "model":
            with _building(device, dtype):
                self.module = Stack(spec, shape, point.mode)
            if self.impl_device == "cuda" and device.type != "cuda":
                use_cuda_kernels(self.module)  # RMSNorm: one fused kernel each way, not the composite
            self.params = list(self.module.parameters())
            if shape.vocab:  # issue 24: lm. Token ids in, the LM loss out (no dout)
                ids, self.targets = token_batch(b, n, shape.vocab, device)  # each (B, n) int64
                self.inputs = [ids, self.targets]
                self._run = lambda: self._lm_loss(self.module(ids))  # a scalar
                out_shape = None
            else:
                x = torch.randn(b, n, d, device=device, dtype=dtype, requires_grad=grad)  # (B, n, d)
                self.inputs = [x]
                self._run = lambda: self.module(x)  # (B, n, d)
                out_shape = (b, n, d)
        else:
            kv = shape.n_kv_heads  # issue 24: k and v have the K/V heads (GQA / MQA)
            with _building(device, dtype):  # one module per layer kind: layer_index 0..p-1
                self.module = nn.ModuleList(spec.build(d, h, layer_index=i, kv_heads=shape.kv_heads, rope=shape.rope)
                                            for i in range(spec.layer_period()))
            q, k, v = (torch.randn(b, heads, n, dh, device=device, dtype=dtype, requires_grad=grad)
                       for heads in (h, kv, kv))  # q (B, h, n, dh); k, v (B, K, n, dh)
            if self.module[0].shared_qk:
                k = q  # Reformer: one shared query/key tensor
                self.inputs = [q, v]
            else:
                self.inputs = [q, k, v]
            # scope attention counts only what the cores use: not the unused projections
            self.params = [p for layer in self.module for p in layer.core_parameters()]
            self._run = lambda: _one_period(self.module, q, k, v)  # (B, h, n, dh)
            out_shape = (b, h, n, dh)
        # d(loss)/d(out): a real tensor made before the forward (see the module docstring)
        self.dout = None if point.forward_only or out_shape is None else torch.randn(out_shape, device=device,
                                                                                       dtype=dtype)
        self.autocast, self.scaler = mixed_precision(point, device)  # --- issue 24: precision ---
        # issue 39: a GPU's step traced on the CPU takes CUDA's branches and casts as CUDA's autocast does
        self.kernels = (partial(cuda_step, autocast=bool(shape.autocast))
                        if self.impl_device == "cuda" and device.type != "cuda" else contextlib.nullcontext)
        if self.scaler is not None:  # its scale and growth tracker: state that exists before the step, counted
            self.inputs += [t for t in vars(self.scaler).values() if isinstance(t, torch.Tensor)]  # as inputs
        # --- issue 24: optimizer --- (its states primed: profiler/measure/optimizer.py; ``impl_device``:
        # the device type whose default implementation "" means, when it is not ``device``'s: the GPU model)
        self.optimizer = build_optimizer(point, self.params, self.impl_device) if self.params else None

    def forward(self) -> torch.Tensor:
        """The forward pass; returns what ``backward`` starts from: the output (scope
        attention) or the scalar loss (scope model); the output under no_grad when forward-only."""
        if self.point.forward_only:
            with torch.no_grad(), self.autocast(), checkpoints_ask_no_device():
                out = self._run()
                self._leaving()
            return out
        # (a checkpoint's device type is read in the forward, for its recomputation too: profiler/forks.py)
        with self.autocast(), checkpoints_ask_no_device():  # issue 24: forward and loss under autocast, backward outside
            out = result = self._run()
            if self.point.scope == "model":
                # the loss; out is no longer needed once it exists (with a vocabulary, _run's LM loss)
                loss = (out * self.dout).sum() if self.dout is not None else out
                result = loss if self.scaler is None else self.scaler.scale(loss)  # amp-fp16: the scaled loss
            self._leaving()
        return result

    def _leaving(self) -> None:
        """Just before the autocast region ends (issue 24): ``leaving_autocast``, which a traced
        run's marks set (measure/drive.py: the forward's epilogue)."""
        if self.point.shape.autocast:
            self.leaving_autocast()

    def backward(self, result: torch.Tensor) -> None:
        if self.point.shape.vocab:  # issue 24: peak split. Backward starts in the loss and the head
            self.lm_scope(True)  # (until the final norm's output has its gradient: ``_lm_loss``)
        try:
            result.backward(self.dout if self.point.scope == "attention" else None)
        finally:
            self.lm_scope(False)

    # --- issue 24: peak split ---
    def _lm_loss(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head and loss of the final norm's output ``hidden`` (B, n, d), inside
        ``lm_scope``: in the forward, and (a gradient hook on ``hidden``, which allocates
        nothing) in backward until the head has handed its gradient to the stack, the
        recompute of chunked losses included."""
        if hidden.requires_grad and torch.is_grad_enabled():
            hidden.register_hook(lambda grad: self.lm_scope(False))
        self.lm_scope(True)
        try:
            return self.module.lm.loss(hidden, self.targets)
        finally:
            self.lm_scope(False)

    def grads(self) -> list[torch.Tensor]:
        return [t.grad for t in self.params + self.inputs if t.grad is not None]

    def zero_grad(self) -> None:
        for t in self.params + self.inputs:
            t.grad = None

    # --- issue 24: optimizer ---
    def states_of(self, param: torch.Tensor) -> list[torch.Tensor]:
        """The optimizer's state tensors of one parameter ([] without an optimizer)."""
        return optimizer_states(self.optimizer, param) if self.optimizer is not None else []

    def update(self) -> None:
        """The optimizer step, then its gradients released as ``zero_grad(set_to_none=True)``
        does (nothing without an optimizer)."""
        if self.optimizer is not None:
            if self.scaler is not None:  # amp-fp16: what GradScaler.step does, the gradients unscaled in place
                self.scaler.unscale_(self.optimizer)
            # (GradScaler.step skips the step when a gradient is inf: it asks with .item(), which fake
            # tensors cannot answer; a measured step is one that ran, so it steps)
            self.optimizer.step()
            if self.scaler is not None:
                self.scaler.update()  # the scale for the next step, in place
            self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """Forward, then backward and the optimizer's update unless forward-only."""
        result = self.forward()
        if not self.point.forward_only:
            self.backward(result)
            self.update()
