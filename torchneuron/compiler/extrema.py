"""Minima and maxima along a dimension of int64 and bool tensors, reduced in int32.

Compiled, ``min.dim``, ``max.dim``, ``amin``, ``amax`` and ``argmin`` of int64 tensors and the
first four of bool tensors gave wrong results on every input tried (``torch.min(x, -1)`` of an
int64 tensor: all values -1): torch-mlir starts the reduction from the type's extreme value
(``INT64_MAX`` for a minimum), which the compiler's demotion of i64 to i32 truncates (to -1).
Full reductions (``min()``) and int32 inputs are right. The device computes int64 as int32 (values
beyond int32 wrap, as everywhere on the chip); these reductions now say so explicitly: the input
is cast to int32, reduced, and the values cast back to the input's dtype. Indices are unchanged
(the first extreme, as ATen's).
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten

_NARROWED = (torch.int64, torch.bool)


def _narrow(x: torch.Tensor) -> torch.Tensor:
    return _aten._to_copy.default(x, dtype=torch.int32)


def _values_and_indices(op):
    def reduce_in_int32(x: torch.Tensor, dim: int, keepdim: bool = False):
        if x.dtype not in _NARROWED:
            return NotImplemented
        values, indices = op(_narrow(x), dim, keepdim)
        return _aten._to_copy.default(values, dtype=x.dtype), indices

    return reduce_in_int32


def _values(op):
    def reduce_in_int32(x: torch.Tensor, dim=(), keepdim: bool = False):
        if x.dtype not in _NARROWED:
            return NotImplemented
        return _aten._to_copy.default(op(_narrow(x), dim, keepdim), dtype=x.dtype)

    return reduce_in_int32


def _indices(op):
    def reduce_in_int32(x: torch.Tensor, dim=None, keepdim: bool = False):
        if x.dtype != torch.int64:  # ATen has no argmin/argmax of bool tensors
            return NotImplemented
        return op(_narrow(x), dim, keepdim)

    return reduce_in_int32


def extrema_decompositions() -> dict:
    return {
        _aten.min.dim: _values_and_indices(_aten.min.dim),
        _aten.max.dim: _values_and_indices(_aten.max.dim),
        _aten.amin.default: _values(_aten.amin.default),
        _aten.amax.default: _values(_aten.amax.default),
        _aten.argmin.default: _indices(_aten.argmin.default),
        _aten.argmax.default: _indices(_aten.argmax.default),
    }


__all__ = ["extrema_decompositions"]
