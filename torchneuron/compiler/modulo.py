"""``remainder`` and ``fmod`` by a number, in the forms the lowering gets right.

torch-mlir lowers ``aten.remainder`` to StableHLO's ``remainder``, which takes the sign of the
dividend as C's ``%`` and ``fmod`` do: a compiled ``(-5) % 3`` gave ``-2`` where PyTorch gives
``1``, for every negative operand and every dtype (int32, int64, float32, bfloat16), while eager
mode was right. Python's and PyTorch's ``remainder`` takes the divisor's sign.
:func:`remainder_from_fmod` computes it as ATen's CPU kernel does (``BinaryOpsKernel.cpp``):
``r = fmod(a, b)``, plus ``b`` where ``r`` is nonzero and its sign differs from ``b``'s. That
holds for ±0, infinities and NaN as well (``fmod(-1, inf) = -1`` becomes ``inf``, as on the CPU).

``aten.fmod.Scalar`` is not lowered at all (it ran in eager between compiled regions);
:func:`fmod_by_number` is ``fmod.Tensor`` with the number as a 0-d tensor of the result's dtype.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .integer_inputs import promoted_operands

_aten = torch.ops.aten


def _as_tensors(a, b):
    """Both operands as tensors of the result's dtype, or ``None`` for the dtypes left to the op
    (bool and complex: ATen refuses them)."""
    _, dtype = elementwise_dtypes(a, b, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if dtype == torch.bool or dtype.is_complex:
        return None
    return promoted_operands(a, b, ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)


def remainder_from_fmod(a, b):
    operands = _as_tensors(a, b)
    if operands is None:
        return NotImplemented
    a, b = operands
    r = _aten.fmod.Tensor(a, b)
    zero = _aten.scalar_tensor.default(0, dtype=r.dtype, device=r.device)
    signs_differ = _aten.ne.Tensor(_aten.lt.Tensor(r, zero), _aten.lt.Tensor(b, zero))
    shift = _aten.logical_and.default(_aten.ne.Tensor(r, zero), signs_differ)
    return _aten.where.self(shift, _aten.add.Tensor(r, b), r)


def fmod_by_number(a: torch.Tensor, b):
    operands = _as_tensors(a, b)
    if operands is None:
        return NotImplemented
    return _aten.fmod.Tensor(*operands)


def modulo_decompositions() -> dict:
    return {
        _aten.remainder.Tensor: remainder_from_fmod,
        _aten.remainder.Scalar: remainder_from_fmod,
        _aten.remainder.Scalar_Tensor: remainder_from_fmod,
        _aten.fmod.Scalar: fmod_by_number,
    }


__all__ = ["fmod_by_number", "modulo_decompositions", "remainder_from_fmod"]
