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

The forward overloads ``upsample_{bilinear2d,trilinear3d,bicubic2d}.default`` (which
``F.interpolate`` reaches through its ``.vec`` forms, decomposed already) take PyTorch's own
decompositions.
"""

from __future__ import annotations

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
        return _aten._to_copy.default(_aten.eq.Tensor(
            _aten.unsqueeze.default(_aten.arange.default(out, dtype=torch.int64, device=like.device), 1),
            _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)),
            dtype=dtype)
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
    return table


__all__ = ["interpolation_matrix", "upsampling_decompositions"]
