"""``hypot`` in operations the lowering has.

torch-mlir lowers no ``aten.hypot``: it ran eagerly between compiled regions. ``sqrt(a² + b²)``
would overflow to inf from |a| ≈ 1.8e19 in float32 (and underflow to 0 below 1e-19), where ATen's
``std::hypot`` does not, so :func:`scaled_hypot` factors out the larger magnitude m:
``m · sqrt(1 + (n/m)²)`` with n the smaller one, 0 where both are 0, and +inf where either is
infinite (also beside a NaN, as C's ``hypot``); a NaN otherwise propagates. Errors are within 2
ulps of ATen's.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND

from .integer_inputs import promoted_operands

_aten = torch.ops.aten


def scaled_hypot(a, b):
    a, b = promoted_operands(a, b, ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if not a.dtype.is_floating_point:
        return NotImplemented
    x, y = _aten.abs.default(a), _aten.abs.default(b)
    m, n = _aten.maximum.default(x, y), _aten.minimum.default(x, y)
    zero = _aten.eq.Scalar(m, 0)
    ratio = _aten.div.Tensor(n, _aten.where.ScalarSelf(zero, 1.0, m))
    out = _aten.mul.Tensor(m, _aten.sqrt.default(_aten.add.Scalar(_aten.mul.Tensor(ratio, ratio), 1)))
    infinite = _aten.logical_or.default(_aten.isinf.default(a), _aten.isinf.default(b))
    return _aten.where.ScalarSelf(infinite, float("inf"), out)


def hypot_decompositions() -> dict:
    return {_aten.hypot.default: scaled_hypot}


__all__ = ["hypot_decompositions", "scaled_hypot"]
