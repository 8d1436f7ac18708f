"""Which SDPA kernel torch actually ran: read off the dispatcher, never assumed.

``F.scaled_dot_product_attention`` is a composite op: it asks ``_fused_sdp_choice``
(torch's own selection rules for the device, dtype, shapes and enabled backends), then
calls one backend op, which reaches the dispatcher under its own name. A dispatch mode
that only looks at op names sees which: ``_scaled_dot_product_flash_attention``
(``_for_cpu`` on a CPU), ``_efficient_attention``, ``_cudnn_attention``,
``_fused_attention_overrideable``. The math backend has no op of its own (it decomposes
into matmuls and a softmax below autograd), so the SDPA calls themselves are counted one
level up, by a function mode: calls that reached no backend op ran the math path.
Nothing here holds a tensor: the memory pass it watches keeps its peak.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# forward ops only: their backward ops name the same kernel
BACKEND_OF = {"_scaled_dot_product_flash_attention": "flash",
              "_scaled_dot_product_flash_attention_for_cpu": "flash",
              "_scaled_dot_product_efficient_attention": "efficient",
              "_scaled_dot_product_cudnn_attention": "cudnn",
              "_scaled_dot_product_fused_attention_overrideable": "overrideable",
              "_flash_attention_forward": "flash", "_efficient_attention_forward": "efficient"}


class _Calls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.sdpa = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.sdpa += 1
        return func(*args, **(kwargs or {}))


class _Kernels(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.backends: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        backend = BACKEND_OF.get(func._schema.name.split("::", 1)[-1])
        if backend is not None:
            self.backends[backend] = self.backends.get(backend, 0) + 1
        return func(*args, **(kwargs or {}))


class SdpaSpy:
    """Inside: ``backends`` counts the SDPA calls by the kernel that ran them (flash,
    efficient, cudnn, overrideable, math)."""

    def __init__(self):
        self.backends: dict = {}
        self._calls, self._kernels = _Calls(), _Kernels()

    def __enter__(self) -> "SdpaSpy":
        self._calls.__enter__()
        self._kernels.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._kernels.__exit__(*exc)
        self._calls.__exit__(*exc)
        self.backends = dict(self._kernels.backends)
        fused = sum(self.backends.values())
        if self._calls.sdpa > fused:  # calls that reached no fused kernel ran the math path
            self.backends["math"] = self._calls.sdpa - fused
        return False

    def summary(self) -> str:
        """'cudnn', or 'flash+math' when a point ran more than one kernel; '' when it called no SDPA."""
        return "+".join(sorted(self.backends))
