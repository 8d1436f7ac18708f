"""Ops whose CUDA kernel allocates differently from the CPU op the trace recorded (issue 39).

The trace is a CPU run under fake tensors (profiler/memmodel/trace.py): each op's outputs
are what its meta function (the CPU kernel's shapes and dtypes) allocates. For most ops a
CUDA kernel allocates exactly the same outputs; for the ops below it does not, and
``apply`` rewrites their events the way the CUDA kernel in torch 2.11 allocates. Each rule
is a rule of the op on CUDA (keyed on its arguments' dtypes), never of a variant or a shape.
The tracker records these ops' tensor arguments (``TRACE_DETAIL_OPS`` in
profiler/measure/tracker.py) so the rules read dtypes and shapes, not guesses.

1. ``native_layer_norm``: the saved mean and rstd. ``layer_norm_cuda``
   (aten/src/ATen/native/cuda/layer_norm_kernel.cu) allocates them as
   ``at::empty({M}, X->options().dtype(acc_type))`` with
   ``acc_type = at::toAccumulateType(input.scalar_type(), /*is_cuda=*/true)``: float32 for
   a bfloat16 or float16 input. The CPU op keeps them in the input's dtype (the trace shows
   M x 2 bytes each for bf16), so on CUDA each is twice as large and lives as long
   (saved for backward).
2. ``_softmax_backward_data``: ``softmax_backward_cuda_out`` (aten/src/ATen/native/cuda/
   SoftMax.cu) computes ``Tensor tmp = grad * output;`` and hands it to
   ``host_softmax_backward``: one temporary of the gradient's size, allocated after the
   structured op's output (grad_input) and freed on return. The CPU kernel has none. For
   materialised attention this is one more (B, H, n, n) tensor at the backward's peak.
   ``log_softmax``'s backward has no such temporary (not rewritten).
3. ``sum``, ``mean``: the reduction kernel's own staging buffer and semaphores, allocated
   after the output and freed on return when the kernel splits its inputs across thread
   blocks (``cuda_reduce.reduce_buffers``: Reduce.cuh's ``setReduceConfig``; it depends on
   the GPU's SM count and compute capability, so only with ``gpu``). A bias gradient's
   column sum takes as much as an (n, 4 d) bfloat16 tensor.
4. ``native_layer_norm_backward``, ``_fused_rms_norm_backward``: over more than 65,536 rows of a
   narrow norm, the weight's (and bias's) gradient is summed in partial-sum buffers, then a column
   sum replaces the gradient the op allocated first (``cuda_norm_backward``; with ``gpu`` only).
5. ``native_dropout`` (a GPU's step runs it where the CPU runs dropout's composite:
   measure/cuda_branches.py): ``dropout_cuda`` (aten/src/ATen/native/cuda/Dropout.cu) allocates
   the bool mask first (``at::empty_like(self, ...dtype(kBool))``), then the output
   (``at::empty_like(self)``); the trace has them in the order the op returns them, (output, mask).
   Only where ``dropout_cuda`` runs: training, 0 < p < 1 (p == 1 and eval allocate the output first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from attnprof.profiler.aten_ops import op_base
from attnprof.profiler.memmodel.cuda_norm_backward import norm_backward_outputs, partial_rows
from attnprof.profiler.memmodel.cuda_reduce import reduce_buffers
from attnprof.profiler.records import DTYPE_BYTES

ALLOC, FREE, OP = "alloc", "free", "op"  # = profiler.measure.tracker's (no torch import here)

LAYER_NORM = "native_layer_norm"
SOFTMAX_BACKWARD = "_softmax_backward_data"
REDUCTIONS = frozenset({"sum", "mean"})  # gpu_reduce_kernel with a dtype's own acc type
NATIVE_DROPOUT = "native_dropout"  # rule 5
NORM_BACKWARDS = frozenset({"native_layer_norm_backward", "_fused_rms_norm_backward"})  # rule 4
# at::toAccumulateType(dtype, is_cuda=true) (aten/src/ATen/AccumulateType.h): the CUDA
# accumulate type of each floating dtype the model knows
CUDA_ACC = {"bfloat16": "float32", "float16": "float32", "float32": "float32", "float64": "float64"}
# the type promotion of two floating dtypes (c10/core/ScalarType.h promoteTypes): the wider,
# float16 with bfloat16 giving float32
_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


@dataclass
class CudaOps:
    events: list
    rewritten: dict = field(default_factory=dict)  # op -> how many of its calls were rewritten


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return a if _RANK.get(a, 0) >= _RANK.get(b, 0) else b


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _outputs_at(events: list, i: int) -> list:
    """Positions of the ALLOC events right after the OP at ``i``."""
    out, j = [], i + 1
    while j < len(events) and events[j][0] == ALLOC:
        out.append(j)
        j += 1
    return out


def _args(info) -> list:
    """The traced op's tensor arguments (TensorInfo or None each), [] when not described."""
    return (info.get("args") or []) if isinstance(info, dict) else []


def _reduced_dims(name: str, info) -> Optional[tuple]:
    """The dimensions a traced sum/mean reduces (() = all), None where the trace does not say."""
    if name.endswith(".default"):  # sum(self, *, dtype) / mean(self, *, dtype): every dimension
        return ()
    scalars, args = (info.get("scalars") or []) if isinstance(info, dict) else [], _args(info)
    if len(scalars) >= 2 and (len(args) < 2 or args[1] is None):  # dim is not a tensor
        dim = scalars[1]
        if dim is None:  # sum(x, dim=None): every dimension
            return ()
        if isinstance(dim, int) and not isinstance(dim, bool):
            return (dim,)
        if isinstance(dim, tuple) and all(isinstance(d, int) and not isinstance(d, bool) for d in dim):
            return dim
    return None


def _dropout_cuda_runs(info) -> bool:
    """Rule 5's case: a traced ``native_dropout(input, p, train)`` with 0 < p < 1, training."""
    scalars = (info.get("scalars") or []) if isinstance(info, dict) else []
    p = scalars[1] if len(scalars) > 1 else None
    train = scalars[2] if len(scalars) > 2 else None
    return isinstance(p, float) and 0 < p < 1 and train in (None, True)


def apply(events: list, gpu=None) -> CudaOps:
    """``events`` with the CUDA kernels' allocations of the ops above (a new list; the
    input is left as it is). ``gpu`` (a GpuSpec): also the reductions' buffers (rule 3)."""
    out = CudaOps(list(events))
    ev = out.events
    i, temps = 0, 0
    while i < len(ev):
        e = ev[i]
        if e[0] != OP:
            i += 1
            continue
        base = op_base(e[1])
        args = _args(e[2])
        if base == LAYER_NORM and args and args[0] is not None:
            dtype = args[0].dtype
            acc = CUDA_ACC.get(dtype, dtype)
            outs = _outputs_at(ev, i)
            if acc != dtype and len(outs) == 3 and dtype in DTYPE_BYTES and acc in DTYPE_BYTES:
                for j in outs[1:]:  # mean, rstd: M elements of the accumulate type
                    _, serial, nbytes, op = ev[j]
                    ev[j] = (ALLOC, serial, nbytes // DTYPE_BYTES[dtype] * DTYPE_BYTES[acc], op)
                out.rewritten[base] = out.rewritten.get(base, 0) + 1
        elif base == SOFTMAX_BACKWARD and len(args) >= 2 and args[0] is not None and args[1] is not None:
            grad, output = args[0], args[1]
            outs = _outputs_at(ev, i)
            dtype = _promote(grad.dtype, output.dtype)
            if outs and dtype in DTYPE_BYTES:
                temps += 1
                name = f"cuda.softmax_backward_tmp#{temps}"
                nbytes = _numel(grad.shape) * DTYPE_BYTES[dtype]  # grad * output: grad's shape
                at = outs[-1] + 1  # after grad_input (the structured op's output), freed on return
                ev[at:at] = [(ALLOC, name, nbytes, e[1]), (FREE, name)]
                out.rewritten[base] = out.rewritten.get(base, 0) + 1
                i = at + 2
                continue
        elif gpu is not None and base in REDUCTIONS and args and args[0] is not None:
            dims = _reduced_dims(e[1], e[2])
            x = args[0]
            if (e[2].get("kwargs") or {}).get("dtype") not in (None, x.dtype):
                dims = None  # a reduction into another dtype: torch may cast a copy first; not modelled
            outs = _outputs_at(ev, i)
            sizes = None if dims is None or not outs else reduce_buffers(
                x.shape, x.stride, dims, x.dtype, gpu.sm_count, gpu.compute_capability)
            if sizes and sizes[0]:
                temps += 1
                buf, sem = f"cuda.reduce_buffer#{temps}", f"cuda.reduce_semaphores#{temps}"
                at = outs[-1] + 1  # gpu_reduce_kernel: after the output; both freed on return
                ev[at:at] = [(ALLOC, buf, sizes[0], e[1]), (ALLOC, sem, sizes[1], e[1]), (FREE, sem), (FREE, buf)]
                out.rewritten[base] = out.rewritten.get(base, 0) + 1
                i = at + 4
                continue
        elif base == NATIVE_DROPOUT and _dropout_cuda_runs(e[2]):
            outs = _outputs_at(ev, i)
            if len(outs) == 2:  # (output, mask) -> mask, then output
                ev[outs[0]], ev[outs[1]] = ev[outs[1]], ev[outs[0]]
                out.rewritten[base] = out.rewritten.get(base, 0) + 1
        elif gpu is not None and base in NORM_BACKWARDS:
            added = _norm_partial_sums(ev, i, e, gpu, temps)
            if added:
                temps += 1
                out.rewritten[base] = out.rewritten.get(base, 0) + 1
                i += added
                continue
        i += 1
    return out


def _norm_partial_sums(ev: list, i: int, e: tuple, gpu, tag: int) -> int:
    """Rule 4, in place: a norm backward's partial-sum buffers and the column sums that replace
    its dgamma (and dbeta) (cuda_norm_backward.py); how many events the op now spans, 0 if none."""
    found = norm_backward_outputs(e[1], (e[2] or {}).get("scalars") or [], _args(e[2]))
    outs = _outputs_at(ev, i)
    if found is None or len(outs) != sum(found[2]):
        return 0
    m, n, wanted, dtype = found
    rows = partial_rows(m, n, gpu.sm_count)
    present = [idx for idx, w in enumerate(wanted) if w]  # which of dX, dgamma, dbeta: the outputs' order
    params = [outs[k] for k, idx in enumerate(present) if idx > 0]  # dgamma, dbeta
    if not rows or not params or dtype not in DTYPE_BYTES:
        return 0
    block_bytes = rows * n * DTYPE_BYTES[dtype]
    head, tail = [ev[j] for j in outs if j not in params], []
    firsts, blocks = [], []
    for k, j in enumerate(params):
        _, serial, nbytes, op = ev[j]
        first, part = f"cuda.norm_param_grad#{tag}.{k}", f"cuda.norm_partial_sums#{tag}.{k}"
        firsts.append((ALLOC, first, nbytes, op))
        blocks.append((ALLOC, part, block_bytes, op))
        tail.append((ALLOC, serial, nbytes, op))  # dgamma_blocks.sum(0): the tensor that is returned
        sizes = reduce_buffers((rows, n), (n, 1), (0,), dtype, gpu.sm_count, gpu.compute_capability)
        if sizes and sizes[0]:
            buf, sem = f"cuda.reduce_buffer#n{tag}.{k}", f"cuda.reduce_semaphores#n{tag}.{k}"
            tail += [(ALLOC, buf, sizes[0], op), (ALLOC, sem, sizes[1], op), (FREE, sem), (FREE, buf)]
        tail.append((FREE, first))  # the dgamma the op made first, replaced
    tail += [(FREE, b[1]) for b in reversed(blocks)]  # dbeta_blocks, then dgamma_blocks, on return
    new = head + firsts + blocks + tail
    ev[outs[0]:outs[-1] + 1] = new
    return 1 + len(new)
