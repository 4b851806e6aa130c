"""View ops torch-mlir does not lower (or lowers into code IREE rejects), as ops it handles:
``as_strided`` as a reshape or a gather, ``as_strided_scatter`` as a copy or an ``index_put``, ``unfold``
as a gather.

PyTorch's ``_adaptive_avg_pool2d`` decomposition ends in an ``as_strided`` that gives the
``mean`` the strides eager would have (torchvision's Swin: ``[2, 768, 1, 1]`` with strides
``[768, 1, 768, 768]``). The values are those of a plain reshape: only size-1 dimensions carry
an unusual stride. torch-mlir 20261001 lowers ``as_strided`` to a ``stablehlo.gather`` with
``i64`` ``dense_resource`` index constants, which IREE 3.13's ``--iree-input-demote-i64-to-i32``
leaves in ``i64`` while retyping their uses ("'arith.constant' op failed to verify that all of
{value, result} have same type"). The region fails to compile and is halved again and again down
to that node: Swin-T's forward region of ~640 nodes went through 10 levels of splitting, and its
cold compile took 312 s.

:func:`as_strided_as_view` decomposes such an ``as_strided`` (the input contiguous from the
start of its storage, the output reading the same elements in the same order) into
``aten.view``, one reading a contiguous run of the storage in a permuted order into a view and
a ``permute`` (the strides eager gives it), one reading a box of a row-major array laid over the
storage (``_box``) into slices of that array and a ``permute``, and any other of a contiguous
input into an ``index_select`` of the storage positions it reads, computed in the graph, not as
constants; inputs laid out otherwise are left to the op. ``as_strided_scatter`` writes the same
three forms with ``slice_scatter`` (copies) and the last with an ``index_put``.
"""

from __future__ import annotations

import itertools

import torch

_aten = torch.ops.aten


def _same_order(size, stride) -> bool:
    """Whether ``(size, stride)`` reads elements 0 … numel-1 in row-major order."""
    expected = 1
    for n, s in zip(reversed(list(size)), reversed(list(stride)), strict=True):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _storage_positions(size, stride, offset: int, device) -> torch.Tensor:
    """``offset + sum_k i_k * stride_k`` for every index of a ``(size, stride)`` view, computed in
    the graph (``arange`` arithmetic: no index constant for IREE's i64 demotion to trip on)."""
    positions = _aten.full.default([], offset, dtype=torch.int64, device=device)
    for k, (n, st) in enumerate(zip(size, stride, strict=True)):
        step = _aten.mul.Tensor(_aten.arange.default(n, dtype=torch.int64, device=device), st)
        shape = [1] * len(size)
        shape[k] = n
        positions = _aten.add.Tensor(positions, _aten.view.default(step, shape))
    return _aten.reshape.default(positions, [-1])


def _box(size, stride) -> tuple[list[int], list[int], list[int]] | None:
    """How ``(size, stride)`` reads a box of a row-major array laid over the storage, else None.

    With its non-unit dimensions sorted by decreasing stride ``s_0 > s_1 > …`` (sizes ``n_j``),
    each stride a multiple of the next with room for that dimension (``s_j / s_{j+1} >= n_{j+1}``),
    the view reads ``box[:, :n_1, :n_2, …]`` of the storage seen as an array of shape
    ``[n_0, s_0/s_1, s_1/s_2, …]`` (and a last extent ``s_last`` cut to 1 when the smallest stride is
    not 1): Longformer's attention reads and writes its ``[2, 256, 4, 257]`` chunk of scores
    through strides ``[1050624, 513, 262656, 1]``. Returns the dimension order (largest stride first,
    unit dimensions last), the array's shape and the extents kept of it."""
    dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -stride[d])
    if any(stride[d] <= 0 for d in dims):
        return None
    if not dims:  # a single element
        return list(range(len(size))), [], []
    shape, keep = [size[dims[0]]], [size[dims[0]]]
    for a, b in itertools.pairwise(dims):
        if stride[a] % stride[b] or stride[a] // stride[b] < size[b]:
            return None
        shape.append(stride[a] // stride[b])
        keep.append(size[b])
    if stride[dims[-1]] != 1:
        shape.append(stride[dims[-1]])
        keep.append(1)
    order = dims + [d for d in range(len(size)) if size[d] == 1]
    return order, shape, keep


def _box_storage(flat: torch.Tensor, offset: int, shape: list[int]):
    """The run of ``flat`` from ``offset`` holding ``shape`` in row-major order (zero-padded past
    the end: a box's last row may stop short of its array's), and the padding."""
    length = torch.Size(shape).numel()
    pad = max(0, offset + length - flat.numel())
    if pad:
        flat = _aten.constant_pad_nd.default(flat, [0, pad])
    return _aten.slice.Tensor(flat, 0, offset, offset + length), pad


def _box_read(x: torch.Tensor, size, offset: int, box) -> torch.Tensor:
    order, shape, keep = box
    run, _ = _box_storage(_aten.view.default(x, [x.numel()]), offset, shape)
    out = _aten.view.default(run, shape)
    for j, n in enumerate(keep):
        if n != shape[j]:
            out = _aten.slice.Tensor(out, j, 0, n)
    if len(keep) > sum(1 for n in size if n != 1):  # the extent of a smallest stride above 1
        out = _aten.select.int(out, len(keep) - 1, 0)
    out = _aten.view.default(out, [size[d] for d in order])  # unit dimensions appended
    return _aten.permute.default(out, [order.index(d) for d in range(len(size))])


def _box_write(x: torch.Tensor, src: torch.Tensor, size, offset: int, box) -> torch.Tensor:
    order, shape, keep = box
    flat = _aten.view.default(x, [x.numel()])
    run, pad = _box_storage(flat, offset, shape)
    values = _aten.reshape.default(_aten.permute.default(_aten.expand.default(src, size), order), keep)

    def put(b: torch.Tensor, j: int) -> torch.Tensor:  # b with b[:keep[0], …, :keep[-1]] = values
        if j == len(keep):
            return values
        inner = put(_aten.slice.Tensor(b, j, 0, keep[j]), j + 1)
        return inner if keep[j] == shape[j] else _aten.slice_scatter.default(b, inner, j, 0, keep[j])

    written = _aten.reshape.default(put(_aten.view.default(run, shape), 0), [-1])
    if offset == 0 and written.numel() == flat.numel():  # the box is the whole tensor
        return _aten.view.default(written, list(x.shape))
    if pad:
        flat = _aten.constant_pad_nd.default(flat, [0, pad])
    out = _aten.slice_scatter.default(flat, written, 0, offset, offset + written.numel())
    if pad:
        out = _aten.slice.Tensor(out, 0, 0, x.numel())
    return _aten.view.default(out, list(x.shape))


def as_strided_as_view(x: torch.Tensor, size, stride, storage_offset=None):
    """A reshape-only ``as_strided`` as ``aten.view``, one that reads a box of the storage
    (``_box``: a contiguous run in another dimension order among them) as slices, a view and a
    ``permute``, and any other of a tensor laid out in row-major order from the start of its
    storage as an ``index_select`` of the positions it reads (torch-mlir's own lowering of it
    fails in IREE, see above).

    A box that fits in the storage stays a view and keeps the strides eager gives it: a recorded
    ``view`` further on may depend on them (Longformer's backward views its ``as_strided`` buffer
    as ``[8, 1, 512, 16]`` with strides ``[16, 65536, 128, 1]`` and reshapes it, through two
    transposes, to ``[512, 2, 64]``, which only those strides allow)."""
    if x.storage_offset() != 0 or not x.is_contiguous() or x.dim() == 0:
        return NotImplemented
    size, stride = list(size), list(stride)
    offset = 0 if storage_offset is None else storage_offset
    numel = torch.Size(size).numel()
    if offset == 0 and x.numel() == numel and _same_order(size, stride):
        return _aten.view.default(x, size)
    box = _box(size, stride) if 0 < numel and offset < x.numel() else None
    if box is not None:
        return _box_read(x, size, offset, box)
    flat = _aten.view.default(x, [x.numel()])
    read = _aten.index_select.default(flat, 0, _storage_positions(size, stride, offset, x.device))
    return _aten.view.default(read, size)


def unfold_as_gather(x: torch.Tensor, dimension: int, size: int, step: int):
    """``x.unfold(dimension, size, step)`` as an ``index_select`` of the windows' positions.

    torch-mlir 20261001 does not lower ``aten.unfold`` (its ``step`` stays a ``torch.constant.int``),
    so the op and the padding before it ran eagerly between compiled regions: HaloNet's
    attention unfolds its keys and values twice per block (114 eager nodes in HaloNet-H1's forward
    graph). The gather reads the same elements; the result is a new tensor rather than a view,
    which the graph cannot tell apart: AOTAutograd has already made every mutation functional."""
    if x.dim() == 0:
        return NotImplemented
    dim = dimension % x.dim()
    count = (x.shape[dim] - size) // step + 1
    starts = _aten.arange.start_step(0, count * step, step, dtype=torch.int64, device=x.device)
    offsets = _aten.arange.default(size, dtype=torch.int64, device=x.device)
    positions = (starts.unsqueeze(1) + offsets.unsqueeze(0)).reshape(-1)
    windows = _aten.index_select.default(x, dim, positions)
    shape = list(x.shape)
    windows = windows.reshape(shape[:dim] + [count, size] + shape[dim + 1:])
    return windows.movedim(dim + 1, -1)


def _may_overlap(size, stride) -> bool:
    """Whether two elements of a ``(size, stride)`` view might share a storage position: unless,
    dimensions sorted by stride, each stride passes the furthest position the smaller ones reach."""
    reach = 0
    for n, st in sorted(((n, st) for n, st in zip(size, stride, strict=True) if n > 1), key=lambda p: p[1]):
        if st <= reach:
            return True
        reach += (n - 1) * st
    return False


def as_strided_scatter_as_index_put(x: torch.Tensor, src: torch.Tensor, size, stride, storage_offset=None):
    """``as_strided_scatter`` of a contiguous tensor (from the start of its storage) as an
    ``index_put`` of ``src`` at the storage positions the strided view covers.

    Functionalisation writes a mutation through an ``as_strided`` view this way (the sweep's
    compile mode ran it on the CPU in 29 models, adaptive mode in 83); torch-mlir does not lower
    it. A view that reads a box of the storage (``_box``) is a ``permute`` of ``src`` written into
    that box with ``slice_scatter``, a plain copy when the box is a contiguous run in permuted
    order (Longformer's attention writes its ``[2, 512, 4, 513]`` scores through strides
    ``[1050624, 513, 262656, 1]``): the index form built 2.1M ``i64`` positions there, which
    IREE 3.13's i64 demotion could not legalise in the linked program, so the window was compiled
    again in halves down to that node. Otherwise the positions are
    ``offset + sum_k i_k * stride_k``; a view whose positions may repeat
    (``_may_overlap``: a zero stride, or strides that interleave) is left to the op, as is
    an input whose elements are not laid out in row-major order from offset 0."""
    offset = 0 if storage_offset is None else storage_offset
    if x.storage_offset() != 0 or not x.is_contiguous() or x.dim() == 0:
        return NotImplemented
    size, stride = list(size), list(stride)
    if _may_overlap(size, stride):
        return NotImplemented
    numel = torch.Size(size).numel()
    box = _box(size, stride) if 0 < numel and offset < x.numel() else None
    if box is not None:
        return _box_write(x, src, size, offset, box)
    flat = _aten.view.default(x, [x.numel()])
    values = _aten.reshape.default(_aten.expand.default(src, size), [-1])
    out = _aten.index_put.default(flat, [_storage_positions(size, stride, offset, x.device)], values)
    return _aten.view.default(out, list(x.shape))


def view_decompositions() -> dict:
    return {_aten.as_strided.default: as_strided_as_view, _aten.unfold.default: unfold_as_gather,
            _aten.as_strided_scatter.default: as_strided_scatter_as_index_put}


__all__ = ["as_strided_as_view", "as_strided_scatter_as_index_put", "unfold_as_gather", "view_decompositions"]
