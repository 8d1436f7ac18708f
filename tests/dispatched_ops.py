"""A dispatch mode that logs every op below autocast and autograd, with its outputs' dtypes: what
the CUDA-emulation tests compare against the binary's own CUDA kernels (fake CUDA tensors)."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DispatchedOps(TorchDispatchMode):
    """``seen``: (op name, its tensor outputs' dtypes) for every op that returns a tensor."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        dtypes = tuple(str(o.dtype) for o in outs if isinstance(o, torch.Tensor))
        if dtypes:  # (not prim.device, which a CUDA tensor is asked more often)
            self.seen.append((func.__name__, dtypes))
        return out
