"""``_cdist_forward`` and ``_cdist_backward`` in operations the lowering has.

torch-mlir lowers neither: ``torch.cdist`` ran eagerly between compiled regions (codebook
quantizers, matching costs). ATen's CPU kernels (``Distance.cpp``, ``DistanceOpsKernel.cpp``) are
followed case by case:

* the forward of the 2-norm takes ATen's matrix-product route when ATen does
  (``compute_mode`` 1, or the default with more than 25 rows on either side):
  ``sqrt(clamp_min(|x1|² - 2 x1·x2 + |x2|², 0))`` as ``_euclidean_dist`` builds it;
* otherwise every pair's coordinate differences are formed (``[*batch, r1, r2, m]``) and reduced
  with ATen's map per norm: ``p = 0`` counts the nonzero differences (``min(ceil|d|, 1)``),
  ``p = 1`` sums ``|d|``, ``p = 2`` is ``sqrt(sum d²)``, ``p = inf`` takes the largest ``|d|``, any
  other ``p`` is ``(sum |d|^p)^(1/p)``;
* the backward (the gradient of ``x1``; autograd calls it with the operands swapped for ``x2``)
  is ATen's per norm: ``grad · sign(d)`` for ``p = 1``; ``sign(d) |d|^(p-1) grad / dist^(p-1)``
  for ``p < 2``, zero where ``d = 0`` if ``p < 1``; ``grad d / dist`` for ``p = 2``;
  ``d |d|^(p-2) grad / dist^(p-1)`` above; ``grad sign(d)`` where ``|d|`` is the distance for
  ``p = inf``; zero for ``p = 0`` and wherever the distance is 0; summed over ``x2``'s rows.

ATen computes ``cdist`` in float32 and float64 only (the CPU kernels refuse half precision), so
do these; the pairwise differences are formed only up to ``PAIRWISE_LIMIT`` elements, beyond which
the op stays with ATen's kernel, which never materialises them.
"""

from __future__ import annotations

import math

import torch
from torch._decomp.decompositions import _euclidean_dist

_aten = torch.ops.aten

PAIRWISE_LIMIT = 1 << 24  # elements of the [*batch, r1, r2, m] differences


def _expanded(x1: torch.Tensor, x2: torch.Tensor):
    """Both operands expanded to their common batch shape (as ATen's ``cdist_impl``)."""
    batch = list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    return (_aten.expand.default(x1, batch + list(x1.shape[-2:])),
            _aten.expand.default(x2, batch + list(x2.shape[-2:])), batch)


def _supported(x1: torch.Tensor, x2: torch.Tensor, batch: list[int]) -> bool:
    if x1.dtype not in (torch.float32, torch.float64) or x2.dtype != x1.dtype:
        return False
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    return 0 < math.prod(batch) * r1 * r2 * m <= PAIRWISE_LIMIT


def _differences(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """``x1[..., i, :] - x2[..., j, :]`` as ``[*batch, r1, r2, m]``."""
    return _aten.sub.Tensor(_aten.unsqueeze.default(x1, -2), _aten.unsqueeze.default(x2, -3))


def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None = None):
    x1e, x2e, batch = _expanded(x1, x2)
    if not _supported(x1e, x2e, batch) or p < 0:
        return NotImplemented
    r1, r2 = x1.shape[-2], x2.shape[-2]
    mode = 0 if compute_mode is None else compute_mode
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return _euclidean_dist(x1e, x2e)  # PyTorch's decomposition of ATen's route
    d = _aten.abs.default(_differences(x1e, x2e))
    if p == 0:
        return _aten.sum.dim_IntList(_aten.clamp_max.default(_aten.ceil.default(d), 1), [-1])
    if p == 1:
        return _aten.sum.dim_IntList(d, [-1])
    if p == 2:
        return _aten.sqrt.default(_aten.sum.dim_IntList(_aten.mul.Tensor(d, d), [-1]))
    if math.isinf(p):
        return _aten.amax.default(d, [-1])
    return _aten.pow.Tensor_Scalar(_aten.sum.dim_IntList(_aten.pow.Tensor_Scalar(d, p), [-1]), 1.0 / p)


def cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float, cdist: torch.Tensor):
    x1e, x2e, batch = _expanded(x1, x2)
    if not _supported(x1e, x2e, batch) or grad.dtype != x1.dtype or p < 0:
        return NotImplemented
    if p == 0:
        return _aten.zeros_like.default(x1e, memory_format=torch.contiguous_format)
    d = _differences(x1e, x2e)  # signed, [*batch, r1, r2, m]
    g = _aten.unsqueeze.default(grad, -1)
    dist = _aten.unsqueeze.default(cdist, -1)
    zero = _aten.eq.Scalar(dist, 0)
    safe = _aten.where.ScalarSelf(zero, 1.0, dist)  # no 0/0 in the branch ``where`` discards
    sign = _aten.sign.default(d)
    if p == 1:
        terms = _aten.mul.Tensor(g, sign)
    elif math.isinf(p):
        at_max = _aten._to_copy.default(_aten.eq.Tensor(_aten.abs.default(d), dist), dtype=d.dtype)
        terms = _aten.mul.Tensor(_aten.mul.Tensor(g, sign), at_max)
    else:
        if p < 2:
            num = _aten.mul.Tensor(sign, _aten.pow.Tensor_Scalar(_aten.abs.default(d), p - 1))
        elif p == 2:
            num = d
        else:
            num = _aten.mul.Tensor(d, _aten.pow.Tensor_Scalar(_aten.abs.default(d), p - 2))
        scale = _aten.div.Tensor(g, safe if p == 2 else _aten.pow.Tensor_Scalar(safe, p - 1))
        terms = _aten.where.ScalarSelf(zero, 0.0, _aten.mul.Tensor(num, scale))
        if p < 1:
            terms = _aten.where.ScalarSelf(_aten.eq.Scalar(d, 0), 0.0, terms)
    return _aten.sum.dim_IntList(terms, [-2])


def distance_decompositions() -> dict:
    return {_aten._cdist_forward.default: cdist_forward, _aten._cdist_backward.default: cdist_backward}


__all__ = ["PAIRWISE_LIMIT", "cdist_backward", "cdist_forward", "distance_decompositions"]
