"""Cumulative maximum, minimum and product as log-step scans.

torch-mlir lowers ``aten.cumsum`` but none of ``cummax``, ``cummin`` and ``cumprod``: they ran
eagerly between compiled regions (Grounding-DINO's box heads use ``cummax``). Each is an
associative combination of a prefix, so a Hillis–Steele scan computes it in ``ceil(log2 n)``
steps: step ``s`` combines every element with the one ``2**s`` before it, all positions at once
(the first ``2**s`` with themselves for the extrema, with 1 for the product).

* ``cummax``/``cummin`` scan (value, index) pairs with ATen's rule (``cummax_cummin_helper``):
  the later element wins when it is NaN, or when the running value is not NaN and the later one
  is ``>=`` (``<=``) it — so ties take the last index, and a NaN, once seen, stays with the index
  of the latest NaN. Combining two segments by that rule is associative, which the scan needs.
  The backward is ATen's (a ``scatter_add`` of the gradient at the indices).
* ``cumprod`` multiplies by the shifted product. The products are associated differently than
  ATen's left-to-right loop: float results differ by a few ulps, integers are exact.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def _shifted(x: torch.Tensor, dim: int, shift: int, fill=None) -> torch.Tensor:
    """``x`` moved ``shift`` places later along ``dim``; the first ``shift`` places hold ``fill``,
    or themselves when ``fill`` is None."""
    if fill is None:
        head = _aten.slice.Tensor(x, dim, 0, shift)
    else:
        head_shape = list(x.shape)
        head_shape[dim] = shift
        head = _aten.full.default(head_shape, fill, dtype=x.dtype, device=x.device)
    body = _aten.slice.Tensor(x, dim, 0, x.shape[dim] - shift)
    return _aten.cat.default([head, body], dim)


def _steps(n: int):
    shift = 1
    while shift < n:
        yield shift
        shift *= 2


def _extremum_scan(x: torch.Tensor, dim: int, maximum: bool):
    if x.dim() == 0:
        return _aten.clone.default(x), _aten.zeros_like.default(x, dtype=torch.int64)
    dim = dim % x.dim()
    n = x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = n
    index = _aten.expand.default(
        _aten.view.default(_aten.arange.default(n, dtype=torch.int64, device=x.device), shape), list(x.shape))
    values = x
    floating = x.dtype.is_floating_point
    later_wins = _aten.ge.Tensor if maximum else _aten.le.Tensor
    for shift in _steps(n):
        # (earlier, later) = (values shifted, values); the first ``shift`` elements are combined
        # with themselves, which leaves them as they are (no identity constant: int64 becomes
        # int32 on the chip, and its lowest value with it)
        before = _shifted(values, dim, shift)
        before_index = _shifted(index, dim, shift)
        take_later = later_wins(values, before)
        if floating:
            take_later = _aten.logical_or.default(
                _aten.isnan.default(values),
                _aten.logical_and.default(_aten.logical_not.default(_aten.isnan.default(before)), take_later))
        values = _aten.where.self(take_later, values, before)
        index = _aten.where.self(take_later, index, before_index)
    if n <= 1:  # no step ran: results of their own, not the input
        values, index = _aten.clone.default(values), _aten.clone.default(index)
    return values, index


def scan_cummax(x: torch.Tensor, dim: int):
    return _extremum_scan(x, dim, maximum=True)


def scan_cummin(x: torch.Tensor, dim: int):
    return _extremum_scan(x, dim, maximum=False)


def scan_cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None):
    if dtype is None and not (x.dtype.is_floating_point or x.dtype.is_complex):
        dtype = torch.int64  # ATen promotes integer and boolean inputs
    if dtype is not None and dtype != x.dtype:
        x = _aten._to_copy.default(x, dtype=dtype)
    if x.dim() == 0:
        return _aten.clone.default(x)
    dim = dim % x.dim()
    out = x
    for shift in _steps(x.shape[dim]):
        out = _aten.mul.Tensor(out, _shifted(out, dim, shift, 1))
    return _aten.clone.default(out) if out is x else out


def scan_decompositions() -> dict:
    return {
        _aten.cummax.default: scan_cummax,
        _aten.cummin.default: scan_cummin,
        _aten.cumprod.default: scan_cumprod,
    }


__all__ = ["scan_cummax", "scan_cummin", "scan_cumprod", "scan_decompositions"]
