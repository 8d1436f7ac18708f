"""What an aten op runs on CUDA where that is more than the one kernel its op row describes.

The op rows (``Accounting.op_costs``) are traced on the CPU under fake tensors: one row per
aten op, with the bytes of its distinct input and output tensors. A few ops are composites
below the dispatcher: the trace sees one op, the GPU runs two or more kernels and moves more
bytes. ``extra_traffic(op, read, written)`` gives (kernels, bytes) to add to such a row
on a GPU; (0, 0) for every other op. Each entry names the torch source it is read from
(pytorch/pytorch, ``aten/src/ATen/native/``; the code is the same in torch 2.11, the
version measured in issue 39):

- ``masked_fill`` (out of place, ``.Scalar`` and ``.Tensor``): TensorAdvancedIndexing.cpp,
  ``masked_fill``: ``result = _self->clone(at::MemoryFormat::Contiguous)`` then
  ``result.masked_fill_(mask, source)``. The clone is the row's traffic (reads the input,
  writes the output); the in-place fill is a second kernel that reads the output (and the
  mask) and writes it again: **+1 kernel, +2 x written**.
- ``_softmax_backward_data``: cuda/SoftMax.cu, ``softmax_backward_cuda_out``:
  ``Tensor tmp = grad * output;`` then ``host_softmax_backward(tmp, output, ...)``. The
  ``mul`` is a kernel of its own (reads grad and output, writes tmp: the row's traffic,
  with tmp in place of the gradient); the softmax-backward kernel then reads tmp and the
  output again and writes the input gradient: **+1 kernel, +(read / 2 + 2 x written)**
  (grad and output are the same size, so the output is half the row's read).
- ``logsumexp``: ReduceOps.cpp, ``logsumexp_out_impl``: ``amax`` (the row: reads the input
  N, writes the result W), then on the result's size ``abs``, ``== INFINITY`` and
  ``masked_fill_`` (2 W + 2 W + 3 W at most), ``self - maxes`` (N + W read, N written),
  ``exp_`` in place (N read, N written), ``sum_out`` (N read, W written), ``log_`` (2 W) and
  ``add_`` (3 W): **+8 kernels, +(5 x read + 14 x written)**.
- ``constant_pad_nd``: PadNd.cpp, ``constant_pad_nd``: ``output.fill_(value)`` over the
  whole output, then ``c_output.copy_(c_input)`` into its inner part: the fill writes the
  output, the copy reads the input and writes as much again: **+1 kernel, +read**.
- ``slice_backward``: TensorShape.cpp, ``slice_backward``: ``at::zeros(input_sizes)`` (a fill
  of the whole gradient) then ``grad_input.slice(...).copy_(grad)``: **+1 kernel, +read**.

The CPU keeps what ``attnprof calibrate`` measured: masked_fill and softmax backward by name,
whatever they run inside; the others at their class's rate (not expanded there: its per-op
cost is measured on a module's ops, and a change would move the calibrated CPU model).
"""

from __future__ import annotations

from attnprof.profiler.aten_ops import op_base

# op (overload packet) -> (kernels added, bytes added as a function of (read, written))
_EXTRA = {
    "masked_fill": (1, lambda read, written: 2 * written),
    "_softmax_backward_data": (1, lambda read, written: read / 2 + 2 * written),
    "logsumexp": (8, lambda read, written: 5 * read + 14 * written),
    "constant_pad_nd": (1, lambda read, written: read),
    "slice_backward": (1, lambda read, written: read),
}


def extra_traffic(op, read: float, written: float) -> tuple[int, float]:
    """(kernels, bytes) a CUDA GPU runs for this op beyond what its row says; (0, 0.0) for
    every op that is one kernel as traced (in-place ``masked_fill_`` among them)."""
    if op is None:
        return 0, 0.0
    found = _EXTRA.get(op_base(str(op)))
    if found is None:
        return 0, 0.0
    kernels, more = found
    return kernels, float(more(read, written))


def expanded_ops() -> tuple[str, ...]:
    """The ops this module expands (for the docs and the tests)."""
    return tuple(sorted(_EXTRA))
