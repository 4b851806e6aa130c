"""Linear upsampling's backward as matrix products, and the upsampling overloads torch-mlir lacks.

torch-mlir lowers none of ``upsample_{linear1d,bilinear2d,trilinear3d}_backward`` (the sweep's
adaptive mode ran the first two on the CPU in 5 and 21 models: segmentation heads, FPNs,
vision-language resamplers). Linear interpolation along one dimension is a matrix ``A``
(``[out, size]``): output ``o`` takes ``lambda0`` of input ``i0`` and ``lambda1`` of input
``i1``, with ATen's source index and weights (``compute_source_index_and_lambda`` in
``UpSampleKernel.cpp``: ``area_pixel_compute_scale``/``area_pixel_compute_source_index``, the
index clamped to the input, an output as long as its input copied). Upsampling is then
``A_h @ x @ A_w.T`` and its backward ``A_h.T @ grad @ A_w`` (one product per dimension),
computed in float32 (float64 for float64), as ATen accumulates. The matrices are built in the
graph from ``arange``.

``upsample_bicubic2d_backward`` (SAM-2's towers, 5 models of the adaptive sweep) is the same
with ATen's four-tap cubic convolution matrix per dimension (:func:`cubic_interpolation_matrix`).

``upsample_nearest1d_backward`` and ``_upsample_nearest_exact1d_backward`` (Pe-Audio-Video's
and speech models' 1-d resampling; torch-mlir lowers only the 2-d nearest backward) are the same
with a one-hot matrix: output ``o`` copies input ``min(floor(o * scale), size - 1)``
(``floor((o + 0.5) * scale)`` for nearest-exact) with ATen's float32 ``scale``.

The forward overloads ``upsample_{bilinear2d,trilinear3d,bicubic2d}.default`` (which
``F.interpolate`` reaches through its ``.vec`` forms, decomposed already) take PyTorch's own
decompositions.
"""

from __future__ import annotations

import numpy as np
import torch

_aten = torch.ops.aten


def _scale(size: int, out: int, align_corners: bool, scale: float | None) -> float:
    """ATen's ``area_pixel_compute_scale``."""
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size / out


def interpolation_matrix(out: int, size: int, align_corners: bool, scale: float | None,
                         like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: the weight of input ``i`` in output ``o`` of linear interpolation."""
    if out == size:  # ATen copies (whatever the scale)
        return _identity(size, like, dtype)
    ratio = _scale(size, out, align_corners, scale)
    o = _aten.arange.default(out, dtype=dtype, device=like.device)
    if align_corners:
        src = _aten.mul.Tensor(o, ratio)
    else:
        src = _aten.clamp_min.default(_aten.sub.Tensor(_aten.mul.Tensor(_aten.add.Tensor(o, 0.5), ratio), 0.5), 0.0)
    i0 = _aten.clamp_max.default(_aten._to_copy.default(_aten.floor.default(src), dtype=torch.int64), size - 1)
    lambda1 = _aten.clamp.default(_aten.sub.Tensor(src, _aten._to_copy.default(i0, dtype=dtype)), 0.0, 1.0)
    lambda0 = _aten.rsub.Scalar(lambda1, 1.0)
    i1 = _aten.add.Tensor(i0, _aten._to_copy.default(_aten.lt.Scalar(i0, size - 1), dtype=torch.int64))
    positions = _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)

    def weights(index, lam):
        hit = _aten.eq.Tensor(_aten.unsqueeze.default(index, 1), positions)
        return _aten.mul.Tensor(_aten._to_copy.default(hit, dtype=dtype), _aten.unsqueeze.default(lam, 1))

    return _aten.add.Tensor(weights(i0, lambda0), weights(i1, lambda1))


_CUBIC_A = -0.75  # ATen's bicubic convolution constant


def cubic_interpolation_matrix(out: int, size: int, align_corners: bool, scale: float | None,
                               like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: the weight of input ``i`` in output ``o`` of bicubic interpolation along
    one dimension, as ATen's CPU kernels compute it (``upsample_bicubic2d_backward_out_frame``):
    the source index without clamping, four taps from ``floor(src) - 1`` with Keys' cubic
    convolution coefficients (``A = -0.75``) of ``t = src - floor(src)``, each tap's position
    clamped to the input (so the border taps add up on the edge element)."""
    ratio = _scale(size, out, align_corners, scale)
    o = _aten.arange.default(out, dtype=dtype, device=like.device)
    src = _aten.mul.Tensor(o, ratio) if align_corners else \
        _aten.sub.Tensor(_aten.mul.Tensor(_aten.add.Tensor(o, 0.5), ratio), 0.5)
    floor = _aten.floor.default(src)
    t = _aten.sub.Tensor(src, floor)
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return _aten.add.Tensor(_aten.mul.Tensor(_aten.mul.Tensor(
            _aten.sub.Tensor(_aten.mul.Tensor(x, a + 2), a + 3), x), x), 1.0)

    def far(x):  # 1 < |x| < 2
        inner = _aten.add.Tensor(_aten.mul.Tensor(_aten.sub.Tensor(_aten.mul.Tensor(x, a), 5 * a), x), 8 * a)
        return _aten.sub.Tensor(_aten.mul.Tensor(inner, x), 4 * a)

    rest = _aten.rsub.Scalar(t, 1.0)
    coefficients = (far(_aten.add.Tensor(t, 1.0)), near(t), near(rest), far(_aten.add.Tensor(rest, 1.0)))
    first = _aten.sub.Tensor(_aten._to_copy.default(floor, dtype=torch.int64), 1)
    positions = _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)
    total = None
    for k, c in enumerate(coefficients):
        index = _aten.clamp.default(_aten.add.Tensor(first, k), 0, size - 1)
        hit = _aten._to_copy.default(_aten.eq.Tensor(_aten.unsqueeze.default(index, 1), positions), dtype=dtype)
        term = _aten.mul.Tensor(hit, _aten.unsqueeze.default(c, 1))
        total = term if total is None else _aten.add.Tensor(total, term)
    return total


def nearest_matrix(out: int, size: int, scale: float | None, exact: bool,
                   like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: one-hot rows, output ``o`` copying its nearest input as ATen's CPU kernels
    pick it (``nearest_idx`` / ``nearest_neighbor_exact_compute_source_index``): the same index
    when the sizes agree, ``o // 2`` when the output is twice as long (nearest only), otherwise
    ``floor(o * scale)`` (``floor((o + 0.5) * scale)``) in float32, clamped to the input, where
    ``scale`` is the float32 ``1 / scales`` when given and positive, else ``size / out``."""
    o = _aten.arange.default(out, dtype=torch.int64, device=like.device)
    if out == size and not exact:
        index = o
    elif out == 2 * size and not exact:
        index = _aten.floor_divide.default(o, 2)
    else:
        ratio = float(np.float32(1.0 / scale)) if scale is not None and scale > 0 else \
            float(np.float32(size) / np.float32(out))
        src = _aten._to_copy.default(o, dtype=torch.float32)
        if exact:
            src = _aten.add.Tensor(src, 0.5)
        src = _aten.floor.default(_aten.mul.Tensor(src, ratio))
        index = _aten.clamp_max.default(_aten._to_copy.default(src, dtype=torch.int64), size - 1)
    positions = _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)
    return _aten._to_copy.default(_aten.eq.Tensor(_aten.unsqueeze.default(index, 1), positions), dtype=dtype)


def _nearest1d_backward(exact: bool):
    """The decomposition of ``upsample_nearest1d_backward`` / ``_upsample_nearest_exact1d_backward``
    (``grad, output_size, input_size, scales``): each input's gradient is the sum of the outputs
    that copied it."""

    def backward(grad: torch.Tensor, output_size, input_size, scales=None):
        work = _work_dtype(grad.dtype)
        return _spread(grad, [nearest_matrix(output_size[0], input_size[-1], scales, exact, grad, work)])

    backward.__name__ = ("_upsample_nearest_exact1d" if exact else "upsample_nearest1d") + "_backward_as_matmul"
    return backward


def _identity(n: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    i = _aten.arange.default(n, dtype=torch.int64, device=like.device)
    return _aten._to_copy.default(_aten.eq.Tensor(_aten.unsqueeze.default(i, 1), _aten.unsqueeze.default(i, 0)),
                                  dtype=dtype)


def upsample_bicubic2d_backward_as_matmuls(grad: torch.Tensor, output_size, input_size, align_corners: bool,
                                           scales_h=None, scales_w=None):
    """``upsample_bicubic2d_backward``: ``C_h.T @ grad @ C_w`` with the cubic interpolation
    matrices (SAM-2's vision towers resample their position embeddings bicubically). ATen copies
    the gradient when neither dimension changes size, whatever the scales."""
    work = _work_dtype(grad.dtype)
    sizes = list(input_size)[-2:]
    if list(output_size) == sizes:
        matrices = [_identity(n, grad, work) for n in sizes]
    else:
        matrices = [cubic_interpolation_matrix(out, size, align_corners, scale, grad, work)
                    for out, size, scale in zip(output_size, sizes, (scales_h, scales_w), strict=True)]
    return _spread(grad, matrices)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _spread(grad: torch.Tensor, matrices: list[torch.Tensor]) -> torch.Tensor:
    """``grad``'s last ``len(matrices)`` dimensions each multiplied by its matrix (``[out, size]``):
    the gradient of their interpolation, in the work dtype, returned in ``grad``'s."""
    g = _aten._to_copy.default(grad, dtype=matrices[0].dtype)
    last = g.dim() - 1
    for dim, weights in enumerate(matrices, start=g.dim() - len(matrices)):
        swap = list(range(g.dim()))
        swap[dim], swap[last] = last, dim
        g = _aten.permute.default(_aten.matmul.default(_aten.permute.default(g, swap), weights), swap)
    return _aten._to_copy.default(g, dtype=grad.dtype)


def _backward_as_matmuls(dims: int):
    """The decomposition of ``upsample_{linear1d,bilinear2d,trilinear3d}_backward``
    (``grad, output_size, input_size, align_corners, *scales``)."""

    def backward(grad: torch.Tensor, output_size, input_size, align_corners: bool, *scales):
        work = _work_dtype(grad.dtype)
        scales = list(scales) + [None] * (dims - len(scales))
        matrices = [interpolation_matrix(out, size, align_corners, scale, grad, work)
                    for out, size, scale in zip(output_size, list(input_size)[-dims:], scales, strict=True)]
        return _spread(grad, matrices)

    backward.__name__ = ("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d")[dims - 1] + "_backward_as_matmuls"
    return backward


def upsampling_decompositions() -> dict:
    from torch._decomp import get_decompositions

    table = get_decompositions([_aten.upsample_bilinear2d.default, _aten.upsample_bicubic2d.default,
                                _aten.upsample_trilinear3d.default])
    table[_aten.upsample_linear1d_backward.default] = _backward_as_matmuls(1)
    table[_aten.upsample_bilinear2d_backward.default] = _backward_as_matmuls(2)
    table[_aten.upsample_trilinear3d_backward.default] = _backward_as_matmuls(3)
    table[_aten.upsample_bicubic2d_backward.default] = upsample_bicubic2d_backward_as_matmuls
    table[_aten.upsample_nearest1d_backward.default] = _nearest1d_backward(exact=False)
    table[_aten._upsample_nearest_exact1d_backward.default] = _nearest1d_backward(exact=True)
    return table


__all__ = ["cubic_interpolation_matrix", "interpolation_matrix", "upsample_bicubic2d_backward_as_matmuls",
           "upsampling_decompositions"]
