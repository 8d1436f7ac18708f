"""A registration of Python kernels on a torch op lasts while any holder is inside, and is gone
after the last one leaves, an exception included (profiler/measure/held_kernels.py)."""

import pytest
import torch

from attnprof.profiler.measure.held_kernels import HeldKernels


def _held(released: list) -> HeldKernels:
    def register(lib):  # absolute: a composite alias of abs, so no kernel of torch's is overridden
        lib.impl("absolute", lambda x: torch.full_like(x, 7.0), "AutogradCPU")

    return HeldKernels(register, on_release=lambda: released.append(True))


def test_the_kernels_last_while_holders_nest_and_go_with_the_last():
    released, x = [], torch.tensor([-1.0])
    held = _held(released)
    with held.held():
        with held.held():
            assert torch.absolute(x).item() == 7.0
        assert torch.absolute(x).item() == 7.0 and released == []
    assert torch.absolute(x).item() == 1.0 and released == [True]


def test_an_exception_inside_or_in_registering_leaves_torchs_kernel():
    released, x = [], torch.tensor([-1.0])
    with pytest.raises(KeyError), _held(released).held():
        raise KeyError("inside")
    assert torch.absolute(x).item() == 1.0 and released == [True]

    def bad(lib):
        lib.impl("absolute", lambda t: t, "AutogradCPU")
        raise ValueError("half registered")

    with pytest.raises(ValueError), HeldKernels(bad).held():
        pass
    assert torch.absolute(x).item() == 1.0
