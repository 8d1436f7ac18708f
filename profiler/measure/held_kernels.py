"""Python kernels on torch's own ops, registered for as long as a context holds them (issue 39).

A CPU trace of a GPU's step runs some aten ops as CUDA runs them (measure/cuda_autocast.py on the
AutocastCPU key, measure/cuda_branches.py on AutogradCPU) by registering Python kernels that
override torch's C++ ones. A registration is the process's: ``HeldKernels.held()`` makes it when
the first holder enters, keeps it while holders nest, and destroys it (torch's kernels are back)
when the last one leaves, also on an exception. One thread at a time holds it; another waits.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

import torch


class HeldKernels:
    """``register(lib)`` adds the kernels to an ``aten`` IMPL library; ``on_release()`` runs when
    the last holder leaves, before the kernels go."""

    def __init__(self, register: Callable[[torch.library.Library], None], on_release: Callable[[], None] = lambda: None):
        self._register, self._on_release = register, on_release
        self._lock = threading.RLock()
        self._depth = 0
        self._library = None

    @contextlib.contextmanager
    def held(self):
        with self._lock:
            if self._depth == 0:
                lib = torch.library.Library("aten", "IMPL")
                try:
                    self._register(lib)
                except Exception:
                    lib._destroy()
                    raise
                self._library = lib
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._on_release()
                    self._library._destroy()
                    self._library = None
