"""View ops torch-mlir does not lower, as ops it does: ``as_strided`` calls that only reshape,
as reshapes; ``unfold`` as a gather.

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
``aten.view``; every other call is left to the op.
"""

from __future__ import annotations

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


def as_strided_as_view(x: torch.Tensor, size, stride, storage_offset=None):
    if storage_offset not in (None, 0) or x.storage_offset() != 0 or not x.is_contiguous():
        return NotImplemented
    if x.numel() != torch.Size(size).numel() or not _same_order(size, stride):
        return NotImplemented
    return _aten.view.default(x, list(size))


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


def view_decompositions() -> dict:
    return {_aten.as_strided.default: as_strided_as_view, _aten.unfold.default: unfold_as_gather}


__all__ = ["as_strided_as_view", "unfold_as_gather", "view_decompositions"]
