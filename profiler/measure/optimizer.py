"""The optimizer step after backward (issue 24): torch.optim's own SGD or AdamW over the
point's parameters, so its states and its step's temporaries are counted as torch makes them.

Which implementation. ``optimizer_impl`` "" means what ``torch.optim.AdamW`` (and SGD)
pick by themselves: at step time they call ``torch.optim.optimizer._default_to_fused_or_foreach``
(``use_fused=False``), which asks whether every parameter is a plain tensor on a device in
``_get_foreach_kernels_supported_devices()``. ``default_impl`` asks that function itself
about a real one-element CPU tensor; for another device (CUDA: the GPU memory model and
GPU runs) it reads the same device list, since a probe tensor there would initialise the
device (docs/gpu.md: fork). In torch 2.13 that is forloop on the
CPU and foreach on CUDA. The choice is always passed to the constructor explicitly: a fake
parameter is a ``FakeTensor``, not a plain tensor, and torch's own default would pick the
for-loop for it everywhere.

The states exist before the measured step. torch creates them on the first ``step()``;
``prime`` runs that first step once, on zero gradients, when the workload is built (outside
any tracker), then drops the gradients again. So the states are torch's own (AdamW:
``step``, ``exp_avg``, ``exp_avg_sq`` per parameter, the ``step`` a 0-dim float32 tensor:
4 bytes per parameter *tensor* on the CPU, on the device when fused; SGD with momentum:
``momentum_buffer``), and the measured forward, backward and step run with them live.

SGD runs with momentum 0.9: what people train with (Sutskever et al. 2013, "On the
importance of initialization and momentum in deep learning"); plain SGD keeps no state,
and its step would only be an in-place update. AdamW (Loshchilov & Hutter 2019,
"Decoupled Weight Decay Regularization") runs with torch's defaults.
"""

from __future__ import annotations

from typing import Optional

import torch

from attnprof.errors import UserError
from attnprof.profiler.measure import real_counters

SGD_MOMENTUM = 0.9  # the momentum people train with (see the module docstring)
SGD_LR = 1e-3  # any value: memory does not depend on it


class OptimizerError(UserError):
    """An optimizer option that cannot run."""


def default_impl(device_type: str) -> str:
    """What torch.optim picks by itself for parameters on ``device_type`` (module docstring)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    if device_type == "cpu":  # a real tensor: torch's own check reads its type and device
        fused, foreach = _default_to_fused_or_foreach([torch.empty(1)], differentiable=False, use_fused=False)
    else:  # its rule, from its device list: a probe tensor would initialise the device (and poison fork)
        fused, foreach = False, device_type in _get_foreach_kernels_supported_devices()
    return "fused" if fused else "foreach" if foreach else "forloop"


def resolved_impl(shape, device_type: str) -> str:
    """The implementation a point's step runs: its ``optimizer_impl``, or torch's default."""
    return shape.optimizer_impl or default_impl(device_type)


def build(point, params: list, impl_device: str) -> Optional[torch.optim.Optimizer]:
    """The point's optimizer over ``params`` (None for "none"), its states primed; ``impl_device``:
    the device type whose default implementation "" means."""
    shape = point.shape
    if shape.optimizer == "none":
        if shape.optimizer_impl:
            raise OptimizerError(f"optimizer_impl {shape.optimizer_impl} needs an optimizer (--optimizer sgd | adamw)")
        return None
    if point.forward_only:
        raise OptimizerError(f"optimizer {shape.optimizer} needs a backward: leave out forward_only (--forward-only)")
    impl = resolved_impl(shape, impl_device)
    flags = {"foreach": impl == "foreach", "fused": impl == "fused"}
    try:
        if shape.optimizer == "sgd":
            optimizer = torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM, **flags)
        else:
            optimizer = torch.optim.AdamW(params, **flags)
    except RuntimeError as exc:  # e.g. no fused kernel for this device or dtype in this torch
        raise OptimizerError(f"torch {torch.__version__} cannot run {impl} {shape.optimizer}: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    prime(optimizer, params)
    return optimizer


# Under fake tensors: what the first step made for a parameter of a given layout, as a recipe
# (_recipe), so later workloads of this process make the same states without stepping again.
RECIPES: dict = {}  # (optimizer, its defaults, the parameter's shape, stride, dtype, device) -> [(key, how)]
RECIPES_SIZE = 4096


def prime(optimizer: torch.optim.Optimizer, params: list) -> None:
    """Create the states as torch does: one first step on zero gradients, which then go.

    A for-loop optimizer takes that first step with its foreach implementation: torch makes
    the states the same way whichever runs the arithmetic (AdamW's ``_init_group``; SGD's
    momentum buffer a clone of the gradient: tests/profiler/measure/test_optimizer.py
    compares every state's layout), in a few list ops instead of ~12 ops per parameter.

    Under fake tensors (a prediction) the first step runs once per parameter layout in a
    process: what it made is kept as a recipe (each state's shape, stride, dtype and device;
    a 0-dim state FakeTensorMode tracks a value of, AdamW's ``step``, with that value, so the
    step's ``.item()`` still answers), and a parameter of a known layout gets its states from
    it (tested equal to a first step's, value included). A for-loop optimizer's counters are
    then real CPU tensors (measure/real_counters.py: FakeTensorMode cannot cache their ops).
    Real tensors always step."""
    fake = [_fake_key(optimizer, p) for p in params]
    if all(key is not None for key in fake):
        missing = [(p, key) for p, key in zip(params, fake) if key not in RECIPES]
        if missing:
            first_step(optimizer, [p for p, _ in missing])
            if len(RECIPES) >= RECIPES_SIZE:
                RECIPES.clear()
            for p, key in missing:
                RECIPES[key] = _recipe(optimizer.state[p])
        real = counters_may_be_real(optimizer) and real_counters.ENABLED  # real_counters.py
        for p, key in zip(params, fake):
            if real or p not in optimizer.state or not optimizer.state[p]:
                optimizer.state[p] = {name: _made(how, real) for name, how in RECIPES[key]}
        return
    first_step(optimizer, params)


def first_step(optimizer: torch.optim.Optimizer, params: list) -> None:
    """torch's own first step over ``params`` on zero gradients (then dropped): their states."""
    for p in params:
        p.grad = torch.zeros_like(p)
    forloop = [g for g in optimizer.param_groups if steps_one_by_one(g)]
    for group in forloop:
        group["foreach"] = True
    try:
        optimizer.step()
    finally:
        for group in forloop:
            group["foreach"] = False
    optimizer.zero_grad(set_to_none=True)


def _fake_key(optimizer, p) -> Optional[tuple]:
    """The recipe key of a fake parameter; None for a real one."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not isinstance(p, FakeTensor):
        return None
    return (type(optimizer).__name__, repr(sorted(optimizer.defaults.items())), tuple(p.shape), p.stride(),
            p.dtype, str(p.device))


def _recipe(state: dict) -> list:
    out = []
    for name, value in state.items():
        constant = getattr(value, "constant", None) if isinstance(value, torch.Tensor) else None
        if isinstance(constant, torch.Tensor):  # a value FakeTensorMode tracks (AdamW's step)
            out.append((name, ("tensor", constant.tolist(), value.dtype, str(value.device))))
        elif isinstance(value, torch.Tensor):
            out.append((name, ("empty", tuple(value.shape), value.stride(), value.dtype, str(value.device))))
        else:
            out.append((name, ("value", value)))
    return out


def steps_one_by_one(group: dict) -> bool:
    """Whether a param group runs torch's for-loop step (``_single_tensor_*``): neither
    foreach nor fused."""
    return not group.get("foreach") and not group.get("fused")


def counters_may_be_real(optimizer: torch.optim.Optimizer) -> bool:
    """Whether every group steps one parameter after another and touches its counter only
    with the counter first (``step_t += 1``, ``.item()``): not capturable or differentiable,
    whose ``beta1 ** step`` would mix a real counter with fake tensors (``build`` sets neither)."""
    return all(steps_one_by_one(g) and not g.get("capturable") and not g.get("differentiable")
               for g in optimizer.param_groups)


def _made(how: tuple, real_counter: bool = False):
    if how[0] == "tensor":
        if real_counter and how[3] == "cpu" and not how[2].is_complex:
            return real_counters.real_counter(how[1], how[2])
        return torch.tensor(how[1], dtype=how[2], device=how[3])
    if how[0] == "empty":
        return torch.empty_strided(how[1], how[2], dtype=how[3], device=how[4])
    return how[1]


def states(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> list:
    """The state tensors torch keeps for ``param``, in the order it made them."""
    return [v for v in optimizer.state.get(param, {}).values() if isinstance(v, torch.Tensor)]


def host_serials(tracker, optimizer: Optional[torch.optim.Optimizer], step_at: Optional[int],
                 origins: Optional[dict] = None) -> frozenset:
    """The tracker's serials of the storages a GPU step keeps on the host, which take no
    device memory: the optimizer's step counters (``host_counters``), and, where there are
    such, the 0-dim ``torch.tensor(1.0, device="cpu")`` a foreach AdamW adds to them
    (torch/optim/adam.py, ``_multi_tensor_adam``: ``torch._foreach_add_(steps, ...)``),
    found in the step pass from trace position ``step_at`` as the 0-dim tensors
    ``lift_fresh`` made there; no other step torch.optim runs here makes a tensor with
    ``torch.tensor``. Empty without an optimizer. ``origins``: the tracker's, where the
    caller has them already."""
    from attnprof.profiler.measure.tracker import ALLOC

    host = set(tracker.live_serials(host_counters(optimizer)))
    if host and step_at is not None and tracker.trace is not None:
        origins = tracker.origins() if origins is None else origins
        host |= {e[1] for e in tracker.trace[step_at:]
                 if e[0] == ALLOC and e[3].startswith("lift_fresh") and origins[e[1]][1] == ()}
    return frozenset(host)


def on_the_device(events: list, host: frozenset) -> list:
    """Tracker ``events`` less the allocations and frees of ``host`` serials (``host_serials``):
    what a GPU's allocator sees."""
    if not host:
        return list(events)
    from attnprof.profiler.measure.tracker import ALLOC, FREE

    return [e for e in events if not (e[0] in (ALLOC, FREE) and e[1] in host)]


def host_counters(optimizer: Optional[torch.optim.Optimizer]) -> list:
    """The step counters torch keeps on the host whatever the parameters' device: AdamW's
    0-dim ``step`` where a group is neither fused nor capturable (``_init_group`` makes it
    with ``torch.tensor(0.0)``: a CPU tensor; fused or capturable, on the parameter's device)."""
    if optimizer is None:
        return []
    out = []
    for group in optimizer.param_groups:
        if group.get("fused") or group.get("capturable"):
            continue
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                out.append(step)
    return out

