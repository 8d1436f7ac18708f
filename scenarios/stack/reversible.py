"""Reversible residual coupling: activation memory independent of depth.

Gomez et al. 2017, "The Reversible Residual Network", arXiv 1707.04585;
Kitaev et al. 2020, "Reformer", arXiv 2001.04451, §3:
    Y1 = X1 + F(X2),  Y2 = X2 + G(Y1);   X2 = Y2 - G(Y1),  X1 = Y1 - F(X2).
The autograd Function below saves only the last layer's outputs and rebuilds every
layer's inputs during backward. F and G run again in backward with the RNG state they
saw in forward (LSH hashes, dropout), restored inside ``fork_rng`` so the caller's
global RNG stream is left untouched.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


class ReplayRNG:
    """Records the CPU (and CUDA, if used) RNG state before a call; replays it later."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = torch.cuda.get_rng_state(device) if self.cuda else None
        self.device = device

    @contextlib.contextmanager
    def replay(self):
        """Inside: the RNG as it was at record time. After: the caller's stream, untouched."""
        with torch.random.fork_rng(devices=[self.device] if self.cuda else [], enabled=True):
            torch.set_rng_state(self.cpu_state)
            if self.cuda:
                torch.cuda.set_rng_state(self.cuda_state, self.device)
            yield


# --- issue 24: precision ---
class ReplayAutocast:
    """The autocast state of the forward (``torch.autocast``'s enabled, dtype, cache flags on
    the device's type, and on the CPU), entered again around backward's recompute, as
    ``torch.utils.checkpoint`` does: F and G rebuild in backward the low-precision tensors
    they made in forward; the backward of the rebuilt graph runs outside it, as usual."""

    def __init__(self, device: torch.device):
        types = dict.fromkeys((device.type, "cpu"))
        self.states = [(kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)) for kind in types]
        self.cache = torch.is_autocast_cache_enabled()

    def replay(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for kind, enabled, dtype in self.states:
            if enabled:
                stack.enter_context(torch.autocast(kind, dtype=dtype, cache_enabled=self.cache))
        return stack


class _ReversibleStack(torch.autograd.Function):
    """The blocks' parameters are inputs of the Function, after x1, x2 and the blocks:
    its output then needs a gradient whenever they do, even when x does not (a frozen
    embedding, a plain input batch), and backward returns their gradients, so
    ``torch.autograd.grad`` sees them as well as ``.backward()``."""

    @staticmethod
    def forward(ctx, x1, x2, blocks, *params):
        ctx.blocks = blocks
        ctx.rng = []
        ctx.autocast = ReplayAutocast(x1.device)  # issue 24
        with torch.no_grad():
            for block in blocks:
                f_rng = ReplayRNG(x1.device)
                x1 = x1 + block.f(x2)
                g_rng = ReplayRNG(x1.device)
                x2 = x2 + block.g(x1)
                ctx.rng.append((f_rng, g_rng))
        ctx.save_for_backward(x1, x2)  # only the final outputs: O(1) in depth
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        grads = {}  # id(parameter) -> its gradient
        for block, (f_rng, g_rng) in zip(reversed(ctx.blocks), reversed(ctx.rng)):
            with torch.enable_grad():
                y1 = y1.detach().requires_grad_()
                with g_rng.replay(), ctx.autocast.replay():
                    g_y1 = block.g(y1)
                dx1 = _grad(g_y1, y1, block.g, dy2, grads)
            with torch.no_grad():
                x2 = y2 - g_y1
                dx1 = dy1 + dx1
                del g_y1, y2
            with torch.enable_grad():
                x2 = x2.detach().requires_grad_()
                with f_rng.replay(), ctx.autocast.replay():
                    f_x2 = block.f(x2)
                dx2 = _grad(f_x2, x2, block.f, dx1, grads)
            with torch.no_grad():
                x1 = y1 - f_x2
                dx2 = dy2 + dx2
                del f_x2
            y1, y2, dy1, dy2 = x1, x2.detach(), dx1, dx2
        params = [p for block in ctx.blocks for p in block.parameters()]
        return (dy1, dy2, None, *(grads.pop(id(p), None) for p in params))


def _grad(out, x, fn: nn.Module, dout, grads: dict):
    """d<out, dout>/dx; the gradients of fn's parameters that need one go into ``grads``."""
    params = [p for p in fn.parameters() if p.requires_grad]
    found = torch.autograd.grad(out, [x, *params], dout, allow_unused=True)
    for p, g in zip(params, found[1:]):
        if g is not None:
            if g.stride() != p.stride():  # laid out as the parameter now, as AccumulateGrad would at the end
                g = torch.empty_like(p).copy_(g)
            grads[id(p)] = g if id(p) not in grads else grads[id(p)] + g
    return found[0]


def reversible_stack(x: torch.Tensor, blocks: nn.ModuleList, memory_saving: bool = True) -> torch.Tensor:
    """x (B, n, d) -> (B, n, d) through reversible blocks (each with .f and .g).

    The input is duplicated into both streams and the two outputs are averaged, as in
    the Reformer, so the stack keeps the plain stack's interface. ``memory_saving=False``
    computes the same function with ordinary autograd (every activation stored): the
    reference the custom backward is tested against.
    """
    if memory_saving:
        y1, y2 = _ReversibleStack.apply(x, x, list(blocks), *blocks.parameters())  # each (B, n, d)
    else:
        y1, y2 = x, x
        for block in blocks:
            y1 = y1 + block.f(y2)
            y2 = y2 + block.g(y1)
    return (y1 + y2) / 2
