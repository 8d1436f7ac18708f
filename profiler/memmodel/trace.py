"""The exact allocation/free sequence of one point, recorded under fake tensors on the CPU.

The same Workload, driven the same way (``profiler/measure/drive.drive``: module, inputs,
the upstream gradient, forward, backward) as ``accounting.account(point, fake=True)``,
with the tracker's ``trace`` on and a ``backward`` marker between the passes. Fake *CUDA* tensors cannot be used on the CPU
build of torch (their backward aborts the process, ../shared/NOTES.md), so the trace has
the CPU kernels' allocations; ``profiler/memmodel/sdpa_kernels.py`` substitutes the GPU's where they differ.

With an optimizer (issue 24) the step pass follows backward, and ``optimizer_impl`` ""
means what torch.optim picks for CUDA parameters (foreach where torch has the kernels,
profiler/measure/optimizer.py). Its 0-dim ``step`` tensors, which torch keeps on the host
unless fused or capturable (``optimizer.host_counters``), are left out of the events: they
take no device memory; nor does the 0-dim ``torch.tensor(1.0)`` a foreach step adds to them
(``optimizer.host_serials``). The tracker's own peak (``tensor_peak_bytes``, that of
``predict(on_device(point, "cuda"))``: the step as CUDA runs it, RMSNorm's fused kernel included,
profiler/measure/device_kernels.py) still counts them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from attnprof.profiler.records import Point
from attnprof.profiler.safe_points import deferring

ALLOC = "alloc"  # = profiler.measure.tracker's (imported with torch, inside record_trace)


@dataclass
class Trace:
    point: Point
    events: list  # profiler.measure.tracker event tuples, in order
    tensor_peak_bytes: int  # the tracker's peak: equals predict.fake_run.predict(on_device(point, "cuda"))'s
    sdpa_math: bool = False  # recorded with SDPA forced onto its math path
    wall_ms: float = 0.0
    counts: dict = field(default_factory=dict)  # event kind -> how many


def held_parameters(work) -> list:
    """ALLOC events of the parameters the point's module holds on the device but does not count
    (issue 39): at scope attention the core runs alone and ``Workload.params`` are the core's
    (``core_parameters``: the tracker leaves the projections out, docs/accounting.md), yet the
    module is built whole on the device (profiler/measure/workload.py), so a GPU run holds the
    projections' weights from before the step to its end and ``torch.cuda.max_memory_allocated``
    counts them (measured on the H200: +8 MiB at d_model 1024 bf16, +16 MiB fp32, at every n).
    At scope model every parameter is counted: none."""
    counted = {id(p) for p in work.params}
    module = getattr(work, "module", None)
    if module is None:
        return []
    return [(ALLOC, f"device.uncounted_parameter#{i}", p.untyped_storage().nbytes(), "")
            for i, p in enumerate(q for q in module.parameters() if id(q) not in counted)]


@deferring  # Ctrl-C and SIGTERM wait for a safe point (profiler/safe_points.py)
def record_trace(point: Point, *, sdpa_math: bool = False, seed: int = 0) -> Trace:
    """Run ``point`` once under FakeTensorMode with the tracing tracker; nothing is allocated.

    ``sdpa_math``: force ``F.scaled_dot_product_attention`` onto its math path (what a GPU
    runs when neither fused kernel applies, e.g. float64); the CPU otherwise runs its
    flash kernel, whose events ``kernels.substitute`` replaces.
    """
    import torch

    from attnprof.profiler.measure.drive import drive
    from attnprof.profiler.measure.fakemode import light_dynamo
    from attnprof.profiler.measure.internals import new_fake_mode
    from attnprof.profiler.measure.optimizer import host_serials, on_the_device
    from attnprof.profiler.measure.tracker import MemoryTracker
    from attnprof.profiler.measure.workload import Workload

    start = time.perf_counter()
    torch.manual_seed(seed)
    if sdpa_math:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = sdpa_kernel(SDPBackend.MATH)
    else:
        backend = contextlib.nullcontext()
    with light_dynamo(), new_fake_mode(quick=False):  # made inside: it reads torch._dynamo.config
        work = Workload(point, "cpu", impl_device="cuda")  # the optimizer torch.optim picks on a GPU (issue 24)
        with backend, MemoryTracker(trace=True) as tracker:
            step_at = []

            def phase(name: str) -> None:
                if name == "backward":
                    tracker.mark("backward")
                elif name == "step":
                    step_at.append(len(tracker.trace))

            drive(work, tracker, phase=phase)
            host = host_serials(tracker, getattr(work, "optimizer", None), step_at[0] if step_at else None)  # issue 24
        peak = tracker.peak_bytes
        events = held_parameters(work) + on_the_device(tracker.trace, host)
    counts: dict = {}
    for e in events:
        counts[e[0]] = counts.get(e[0], 0) + 1
    return Trace(point, events, peak, sdpa_math, (time.perf_counter() - start) * 1e3, counts)

