"""``scatter_reduce.two`` in operations the lowering has.

torch-mlir lowers no ``aten.scatter_reduce.two``: it ran eagerly between compiled regions
(TAPAS' segment means, PyG-style pooling). ATen's semantics, for every ``reduce``: an element of
``self`` that no index points at keeps its value; one that some do is the reduction of the
scattered ``src`` elements, with its own value included when ``include_self``.

* ``sum`` and ``mean`` use ``scatter_add`` (of ``src`` and of a count of 1 per scattered
  element): ``mean`` divides by the count (plus one for ``self``), with floor division for
  integers as ATen does.
* ``prod``, ``amax`` and ``amin`` have no accumulating scatter in the lowering; they compare the
  index with every position of the output (a one-hot ``[..., K, M]`` mask, ``K`` scattered and
  ``M`` output positions along ``dim``) and reduce over ``K``. The mask costs ``K · M`` elements
  per row, so these are decomposed only up to :data:`DENSE_LIMIT` mask elements (and where the
  index spans ``self`` in the other dimensions); larger ones stay eager. NaNs propagate, as in
  ATen's ``amax``/``amin``.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten

DENSE_LIMIT = 1 << 24


def _last(t: torch.Tensor, dim: int) -> torch.Tensor:
    order = [d for d in range(t.dim()) if d != dim] + [dim]
    return _aten.permute.default(t, order)


def _restore(t: torch.Tensor, dim: int) -> torch.Tensor:
    order = list(range(t.dim() - 1))
    order.insert(dim, t.dim() - 1)
    return _aten.permute.default(t, order)


def _scattered_src(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``src`` cut to ``index``'s shape: scatter reads only those elements."""
    for d, n in enumerate(index.shape):
        if src.shape[d] != n:
            src = _aten.slice.Tensor(src, d, 0, n)
    return src


def _counts(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    ones = _aten.ones.default(list(index.shape), dtype=torch.int64, device=index.device)
    zeros = _aten.zeros.default(list(self.shape), dtype=torch.int64, device=self.device)
    return _aten.scatter_add.default(zeros, dim, index, ones)


def _dense_reduction(self, dim, index, src, reduce):
    """``[..., M]`` (``dim`` last): the reduction over the elements scattered to each position."""
    onehot = _aten.eq.Tensor(_aten.unsqueeze.default(_last(index, dim), -1),
                             _aten.arange.default(self.shape[dim], dtype=index.dtype, device=index.device))
    values = _aten.unsqueeze.default(_last(src, dim), -1)
    if reduce == "prod":
        return _aten.prod.dim_int(_aten.where.ScalarOther(onehot, values, 1), -2, dtype=src.dtype)
    maximum = reduce == "amax"
    if src.dtype.is_floating_point:
        filler = float("-inf") if maximum else float("inf")
        masked = _aten.where.ScalarOther(onehot, values, filler)
    else:  # no extreme constant: int64's would not survive the chip's int32 (a real element does)
        filler = (_aten.amin.default if maximum else _aten.amax.default)(src)
        masked = _aten.where.self(onehot, values, filler)
    return (_aten.amax.default if maximum else _aten.amin.default)(masked, [-2])


def scatter_reduce_decomposed(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str,
                              include_self: bool = True):
    if self.dim() == 0 or self.dtype == torch.bool or self.dtype.is_complex or src.dtype != self.dtype:
        return NotImplemented
    dim = dim % self.dim()
    if index.numel() == 0:
        return _aten.clone.default(self)
    src = _scattered_src(src, index)
    counts = _counts(self, dim, index)
    hit = _aten.gt.Scalar(counts, 0)
    if reduce in ("sum", "mean"):
        base = self if include_self else _aten.where.ScalarSelf(hit, 0, self)
        total = _aten.scatter_add.default(base, dim, index, src)
        if reduce == "sum":
            return total
        divisor = _aten.add.Tensor(counts, 1) if include_self else _aten.clamp_min.default(counts, 1)
        if self.dtype.is_floating_point:
            return _aten.div.Tensor(total, _aten._to_copy.default(divisor, dtype=self.dtype))
        return _aten.div.Tensor_mode(total, _aten._to_copy.default(divisor, dtype=self.dtype), rounding_mode="floor")
    if reduce not in ("prod", "amax", "amin"):
        return NotImplemented
    spans = all(index.shape[d] == self.shape[d] for d in range(self.dim()) if d != dim)
    if not spans or index.numel() * self.shape[dim] > DENSE_LIMIT:
        return NotImplemented
    reduced = _restore(_dense_reduction(self, dim, index, src, reduce), dim)
    if include_self:
        combine = {"prod": _aten.mul.Tensor, "amax": _aten.maximum.default, "amin": _aten.minimum.default}[reduce]
        reduced = combine(self, reduced)
    return _aten.where.self(hit, reduced, self)


def scatter_reduction_decompositions() -> dict:
    return {_aten.scatter_reduce.two: scatter_reduce_decomposed}


__all__ = ["DENSE_LIMIT", "scatter_reduce_decomposed", "scatter_reduction_decompositions"]
