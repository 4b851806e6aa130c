"""Antialiased bilinear and bicubic resampling (``F.interpolate(..., antialias=True)``) as matrix
products.

torch-mlir lowers neither ``_upsample_bilinear2d_aa`` nor ``_upsample_bicubic2d_aa`` nor their
backwards: they ran eagerly between compiled regions (Cosmos' vision tower resizes its position
embeddings this way). Antialiased resampling is separable: along each dimension output ``o`` is
a normalised sum of the inputs in a window, as ATen's CPU kernels weigh them
(``HelperInterpBase::_compute_indices_min_size_weights_aa`` in ``UpSampleKernel.cpp``):

* ``scale`` is ``area_pixel_compute_scale`` (``size / out``, ``1 / scales_h`` when given,
  ``(size - 1) / (out - 1)`` with ``align_corners``); the filter is stretched by ``scale`` when
  downsampling: ``support = taps / 2 · max(scale, 1)``;
* the window of ``o`` is ``[trunc(center - support + 0.5), trunc(center + support + 0.5))``
  clipped to the input, ``center = scale · (o + 0.5)``;
* input ``i`` of the window weighs ``filter((i - center + 0.5) / max(scale, 1))``, the weights
  divided by their sum; the filter is the triangle for bilinear (2 taps) and Keys' cubic with
  ``a = -0.5`` for bicubic (4 taps; the non-antialiased kernels use ``a = -0.75``).

The matrix ``W`` (``[out, size]``) is built in the graph from ``arange``; resampling is then
``W_h @ x @ W_w.T`` and its gradient ``W_h.T @ grad @ W_w``, computed in float32 (float64 for
float64) as ATen does.
"""

from __future__ import annotations

import math

import torch

from .upsampling import _scale, _spread, _work_dtype

_aten = torch.ops.aten
_CUBIC_A = -0.5


def _triangle(x: torch.Tensor) -> torch.Tensor:
    return _aten.clamp_min.default(_aten.rsub.Scalar(_aten.abs.default(x), 1.0), 0.0)


def _keys_cubic(x: torch.Tensor) -> torch.Tensor:
    a = _CUBIC_A
    x = _aten.abs.default(x)
    near = _aten.add.Tensor(_aten.mul.Tensor(_aten.mul.Tensor(
        _aten.sub.Tensor(_aten.mul.Tensor(x, a + 2), a + 3), x), x), 1.0)
    far = _aten.mul.Tensor(_aten.sub.Tensor(_aten.mul.Tensor(_aten.add.Tensor(
        _aten.mul.Tensor(_aten.sub.Tensor(x, 5.0), x), 8.0), x), 4.0), a)
    return _aten.where.self(_aten.lt.Scalar(x, 1.0), near,
                            _aten.where.ScalarOther(_aten.lt.Scalar(x, 2.0), far, 0.0))


def antialiased_matrix(out: int, size: int, align_corners: bool, scale: float | None, taps: int,
                       like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: the weight of input ``i`` in output ``o`` of antialiased resampling."""
    ratio = _scale(size, out, align_corners, scale)
    support = taps * 0.5 * ratio if ratio >= 1.0 else taps * 0.5
    widest = math.ceil(support) * 2 + 1  # ATen clips a window to this many taps
    invscale = 1.0 / ratio if ratio >= 1.0 else 1.0
    o = _aten.arange.default(out, dtype=dtype, device=like.device)
    center = _aten.mul.Tensor(_aten.add.Tensor(o, 0.5), ratio)
    # C's truncation toward zero of the window bounds; the lower one is clipped to 0 anyway
    low = _aten.clamp_min.default(_aten.trunc.default(_aten.add.Tensor(center, 0.5 - support)), 0.0)
    high = _aten.clamp_max.default(_aten.trunc.default(_aten.add.Tensor(center, support + 0.5)), float(size))
    high = _aten.minimum.default(high, _aten.add.Tensor(low, float(widest)))
    i = _aten.unsqueeze.default(_aten.arange.default(size, dtype=dtype, device=like.device), 0)
    center, low, high = (_aten.unsqueeze.default(t, 1) for t in (center, low, high))
    distance = _aten.mul.Tensor(_aten.add.Tensor(_aten.sub.Tensor(i, center), 0.5), invscale)
    weights = (_triangle if taps == 2 else _keys_cubic)(distance)
    inside = _aten.logical_and.default(_aten.ge.Tensor(i, low), _aten.lt.Tensor(i, high))
    weights = _aten.where.ScalarOther(inside, weights, 0.0)
    total = _aten.sum.dim_IntList(weights, [1], True)
    return _aten.div.Tensor(weights, _aten.where.ScalarSelf(_aten.eq.Scalar(total, 0.0), 1.0, total))


def _matrices(output_size, input_size, align_corners, scales, taps, like, dtype):
    scales = list(scales) + [None] * (2 - len(scales))
    return [antialiased_matrix(out, size, align_corners, scale, taps, like, dtype)
            for out, size, scale in zip(output_size, list(input_size)[-2:], scales, strict=True)]


def _resample(taps: int):
    def forward(x: torch.Tensor, output_size, align_corners: bool, scales_h=None, scales_w=None):
        if not x.dtype.is_floating_point:
            return NotImplemented  # ATen's uint8 kernels round in fixed point
        work = _work_dtype(x.dtype)
        matrices = _matrices(output_size, x.shape, align_corners, (scales_h, scales_w), taps, x, work)
        return _spread(x, [_aten.permute.default(m, [1, 0]) for m in matrices])

    def backward(grad: torch.Tensor, output_size, input_size, align_corners: bool, scales_h=None, scales_w=None):
        work = _work_dtype(grad.dtype)
        return _spread(grad, _matrices(output_size, input_size, align_corners, (scales_h, scales_w), taps, grad, work))

    kind = "bilinear" if taps == 2 else "bicubic"
    forward.__name__, backward.__name__ = f"{kind}_aa_as_matmuls", f"{kind}_aa_backward_as_matmuls"
    return forward, backward


def antialiasing_decompositions() -> dict:
    table = {}
    for taps, fwd, bwd in ((2, _aten._upsample_bilinear2d_aa, _aten._upsample_bilinear2d_aa_backward),
                           (4, _aten._upsample_bicubic2d_aa, _aten._upsample_bicubic2d_aa_backward)):
        forward, backward = _resample(taps)
        table[fwd.default] = forward
        table[bwd.default] = backward
    return table


__all__ = ["antialiased_matrix", "antialiasing_decompositions"]
