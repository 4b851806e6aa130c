"""``diagonal`` and a ``roll`` without dimensions in operations the lowering handles.

* torch-mlir 20261001 fails to legalise ``aten.diagonal`` to StableHLO (a ``torch.constant.int``
  is left over), so ``torch.diag(m)``, ``m.diagonal()`` and ``torch.trace`` ran eagerly between
  compiled regions. :func:`diagonal_by_mask` moves the two dimensions last and keeps, in each row,
  the element on the diagonal: a ``where`` against an ``i == j - offset`` mask summed over the last
  dimension (one non-zero term: exact, and an infinity or NaN elsewhere in the row does not leak
  in), then cut to the diagonal's length. Its backward is PyTorch's (``diagonal_scatter``).
* ``torch.roll(x, k)`` with no dimension rolls the flattened tensor; torch-mlir requires as many
  dimensions as shifts. :func:`roll_flattened` rolls the flat view along dimension 0.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def _diagonal_geometry(x: torch.Tensor, offset: int, dim1: int, dim2: int):
    """The two dimensions moved last (``order``), the diagonal's first row and length, and the
    ``[length, cols]`` mask of its elements in those rows; None where ATen raises its own error."""
    if x.dim() < 2 or x.dtype == torch.bool or x.dtype.is_complex:
        return None
    dim1, dim2 = dim1 % x.dim(), dim2 % x.dim()
    if dim1 == dim2:
        return None
    order = [d for d in range(x.dim()) if d not in (dim1, dim2)] + [dim1, dim2]
    rows, cols = x.shape[dim1], x.shape[dim2]
    length = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    first_row = max(-offset, 0)
    i = _aten.arange.start(first_row, first_row + length, dtype=torch.int64, device=x.device)
    j = _aten.arange.default(cols, dtype=torch.int64, device=x.device)
    on_diagonal = _aten.eq.Tensor(_aten.unsqueeze.default(_aten.add.Tensor(i, offset), 1), _aten.unsqueeze.default(j, 0))
    return order, first_row, length, on_diagonal


def diagonal_by_mask(x: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> torch.Tensor:
    geometry = _diagonal_geometry(x, offset, dim1, dim2)
    if geometry is None:
        return NotImplemented
    order, first_row, length, on_diagonal = geometry
    moved = _aten.permute.default(x, order)
    if length == 0:
        return _aten.empty.memory_format(list(moved.shape[:-2]) + [0], dtype=x.dtype, device=x.device)
    band = _aten.slice.Tensor(moved, -2, first_row, first_row + length)
    kept = _aten.where.ScalarOther(on_diagonal, band, 0)
    return _aten.sum.dim_IntList(kept, [-1], False, dtype=x.dtype)


def diagonal_scatter_by_mask(x: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0,
                             dim2: int = 1) -> torch.Tensor:
    """``diagonal``'s backward and in-place writes to a diagonal: the same mask selects ``src``."""
    geometry = _diagonal_geometry(x, offset, dim1, dim2)
    if geometry is None or src.dtype != x.dtype:
        return NotImplemented
    order, first_row, length, on_diagonal = geometry
    if length == 0:
        return _aten.clone.default(x)
    moved = _aten.permute.default(x, order)
    band = _aten.slice.Tensor(moved, -2, first_row, first_row + length)
    band = _aten.where.self(on_diagonal, _aten.unsqueeze.default(src, -1), band)
    moved = _aten.slice_scatter.default(moved, band, x.dim() - 2, first_row, first_row + length)
    inverse = [order.index(d) for d in range(x.dim())]
    return _aten.clone.default(_aten.permute.default(moved, inverse), memory_format=torch.contiguous_format)


def roll_flattened(x: torch.Tensor, shifts, dims=()):
    if len(dims) != 0 or len(shifts) != 1:
        return NotImplemented  # rolls along given dimensions lower as they are
    flat = _aten.reshape.default(x, [-1])
    return _aten.view.default(_aten.roll.default(flat, list(shifts), [0]), list(x.shape))


def diagonal_and_roll_decompositions() -> dict:
    return {_aten.diagonal.default: diagonal_by_mask, _aten.diagonal_scatter.default: diagonal_scatter_by_mask,
            _aten.roll.default: roll_flattened}


__all__ = ["diagonal_and_roll_decompositions", "diagonal_by_mask", "diagonal_scatter_by_mask", "roll_flattened"]
