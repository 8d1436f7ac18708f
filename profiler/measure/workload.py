"""Build the module and inputs of a point, and run its forward and backward.

Prediction (fake tensors) and measurement (real tensors) both go through here, so the
two run exactly the same ops and their tensor peaks can be compared byte for byte.
"""

from __future__ import annotations

import contextlib

import torch

from attnprof.profiler.records import Point
from attnprof.scenarios.variants.registry import parse_variant
from attnprof.scenarios.stack.blocks import Stack, loss_of


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


class Workload:
    """A point made concrete on a device: ``params``, ``inputs``, ``forward()``, ``backward()``."""

    def __init__(self, point: Point, device: str | torch.device = "cpu"):
        self.point = point
        shape = point.shape
        spec = parse_variant(point.variant)
        spec.check_shape(shape.seq_len, shape.heads, shape.head_dim)
        device, dtype = torch.device(device), shape.torch_dtype
        grad = not point.forward_only
        b, n, d, h, dh = shape.batch, shape.seq_len, shape.d_model, shape.heads, shape.head_dim
        if point.scope == "model":
            with _building(device, dtype):
                self.module = Stack(spec, shape, point.mode)
            x = torch.randn(b, n, d, device=device, dtype=dtype, requires_grad=grad)  # (B, n, d)
            self.inputs = [x]
            self._run = lambda: self.module(x)
        else:
            with _building(device, dtype):
                self.module = spec.build(d, h)
            q, k, v = (torch.randn(b, h, n, dh, device=device, dtype=dtype, requires_grad=grad)
                       for _ in range(3))  # each (B, h, n, dh)
            if self.module.shared_qk:
                k = q  # Reformer: one shared query/key tensor
                self.inputs = [q, v]
            else:
                self.inputs = [q, k, v]
            self._run = lambda: self.module.core(q, k, v)
        # scope attention counts only what the core uses: not the unused projections
        self.params = list(self.module.parameters() if point.scope == "model" else self.module.core_parameters())

    def forward(self) -> torch.Tensor:
        """The forward pass; returns the scalar loss (with no_grad when forward_only)."""
        if self.point.forward_only:
            with torch.no_grad():
                return loss_of(self._run())
        return loss_of(self._run())

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def grads(self) -> list[torch.Tensor]:
        return [t.grad for t in self.params + self.inputs if t.grad is not None]

    def zero_grad(self) -> None:
        for t in self.params + self.inputs:
            t.grad = None

    def step(self) -> None:
        """Forward, then backward unless forward-only."""
        loss = self.forward()
        if not self.point.forward_only:
            self.backward(loss)
