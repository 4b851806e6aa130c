"""Float-valued functions of integer tensors, cast to their float dtype before the op.

``reciprocal``, ``erf``, ``isinf`` and ``copysign`` of an integer or bool tensor compute in a
float dtype (``INT_TO_FLOAT`` promotion: the default dtype, or the float operand's). torch-mlir
lowers them only on float operands, so on integers they fell back to eager between compiled
regions. Each is decomposed into a cast of the integer operands to the dtype ATen computes in,
then the same op, which lowers; float operands are left to the op.

``copysign.Scalar`` (a sign taken from a number) is not lowered on any dtype: it becomes
``copysign.Tensor`` with the number as a 0-d tensor of the result's dtype, floats included.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

_aten = torch.ops.aten

PROMOTED_OPS = (
    _aten.reciprocal.default,
    _aten.erf.default,
    _aten.isinf.default,
    _aten.copysign.Tensor,
)


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _promoted(op: torch._ops.OpOverload):
    def cast_then_op(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if all(_is_float(t) for t in tensors):
            return NotImplemented
        _, dtype = elementwise_dtypes(*args, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT)
        cast = [_aten._to_copy.default(a, dtype=dtype) if isinstance(a, torch.Tensor) and not _is_float(a) else a
                for a in args]
        return op(*cast)

    cast_then_op.__name__ = f"{op.__name__.replace('.', '_')}_of_integers"
    return cast_then_op


def promoted_operands(a, b, kind: ELEMENTWISE_TYPE_PROMOTION_KIND) -> tuple[torch.Tensor, torch.Tensor]:
    """Both operands as tensors of the dtype ``kind`` promotes them to: a tensor cast, a number a
    0-d tensor."""
    _, dtype = elementwise_dtypes(a, b, type_promotion_kind=kind)
    device = (a if isinstance(a, torch.Tensor) else b).device

    def tensor(x):
        if not isinstance(x, torch.Tensor):
            return _aten.scalar_tensor.default(x, dtype=dtype, device=device)
        return x if x.dtype == dtype else _aten._to_copy.default(x, dtype=dtype)

    return tensor(a), tensor(b)


def copysign_by_number(a: torch.Tensor, b):
    return _aten.copysign.Tensor(*promoted_operands(a, b, ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT))


def integer_input_decompositions() -> dict:
    table = {op: _promoted(op) for op in PROMOTED_OPS}
    table[_aten.copysign.Scalar] = copysign_by_number
    return table


__all__ = ["PROMOTED_OPS", "copysign_by_number", "integer_input_decompositions", "promoted_operands"]
