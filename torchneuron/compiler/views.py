"""``as_strided`` calls that only reshape, as reshapes.

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


def view_decompositions() -> dict:
    return {_aten.as_strided.default: as_strided_as_view}


__all__ = ["as_strided_as_view", "view_decompositions"]
