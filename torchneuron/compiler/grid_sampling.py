"""``grid_sampler_2d_backward`` as gathers and an index-add, for bilinear sampling.

torch-mlir does not lower it (the sweep ran it on the CPU in 11 models: deformable attention
in DETR-style detectors and grid-sampled positional embeddings); the forward takes PyTorch's
decomposition already. The gradient follows ATen's CPU kernel (``GridSamplerKernel.cpp``):
each output point's source position ``(ix, iy)`` (the grid unnormalised as ``align_corners``
says, clipped to the border for ``padding_mode="border"``) has four corners with weights
``(x1 - ix)(y1 - iy)`` … ; the input gradient adds each corner's weight times the output
gradient at that corner (corners outside the input add nothing: zero padding), and the grid
gradient sums, over channels, the output gradient times the corners' input values times the
weights' derivatives, times the unnormalisation's (and the clipping's) derivative.
Computed in float32 (float64 for float64) and returned in the inputs' dtypes. Reflection
padding and the nearest and bicubic modes are left to the op.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten
_BILINEAR, _ZEROS, _BORDER = 0, 0, 1


def _source(coord: torch.Tensor, size: int, align_corners: bool, border: bool):
    """ATen's ``grid_sampler_compute_source_index_set_grad``: the position and its derivative."""
    if align_corners:
        pos, scale = _aten.mul.Tensor(_aten.add.Tensor(coord, 1), (size - 1) / 2), (size - 1) / 2
    else:
        pos, scale = _aten.div.Tensor(_aten.sub.Tensor(_aten.mul.Tensor(_aten.add.Tensor(coord, 1), size), 1), 2), size / 2
    grad = _aten.full_like.default(coord, scale)
    if border:  # clip_coordinates_set_grad: 0 at and beyond the edges
        inside = _aten.logical_and.default(_aten.gt.Scalar(pos, 0), _aten.lt.Scalar(pos, size - 1))
        grad = _aten.mul.Tensor(grad, _aten._to_copy.default(inside, dtype=coord.dtype))
        pos = _aten.clamp.default(pos, 0, size - 1)
    return pos, grad


def grid_sampler_2d_backward_as_gathers(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,  # noqa: A002
                                        interpolation_mode: int, padding_mode: int, align_corners: bool,
                                        output_mask):
    if interpolation_mode != _BILINEAR or padding_mode not in (_ZEROS, _BORDER) or input.dim() != 4:
        return NotImplemented
    n, c, height, width = input.shape
    out_h, out_w = grid.shape[1], grid.shape[2]
    dtype = torch.float64 if input.dtype == torch.float64 else torch.float32  # as ATen's accumulation
    given = (input.dtype, grid.dtype)
    input, grid = _aten._to_copy.default(input, dtype=dtype), _aten._to_copy.default(grid, dtype=dtype)
    grad_output = _aten._to_copy.default(grad_output, dtype=dtype)
    ix, gx_mult = _source(_aten.select.int(grid, 3, 0), width, align_corners, padding_mode == _BORDER)
    iy, gy_mult = _source(_aten.select.int(grid, 3, 1), height, align_corners, padding_mode == _BORDER)
    x0, y0 = _aten.floor.default(ix), _aten.floor.default(iy)
    x1, y1 = _aten.add.Tensor(x0, 1), _aten.add.Tensor(y0, 1)
    wx0, wx1 = _aten.sub.Tensor(x1, ix), _aten.sub.Tensor(ix, x0)
    wy0, wy1 = _aten.sub.Tensor(y1, iy), _aten.sub.Tensor(iy, y0)
    corners = [(y0, x0, wy0, wx0), (y0, x1, wy0, wx1), (y1, x0, wy1, wx0), (y1, x1, wy1, wx1)]  # nw ne sw se
    points = out_h * out_w

    def flat(t):  # [n, out_h, out_w] -> [n, 1, points]
        return _aten.view.default(t, [n, 1, points])

    # positions in the input flattened over (batch, height, width): one index per point, shared
    # by the channels, so that the scatter and the gathers move whole channel columns
    base = _aten.view.default(_aten.mul.Tensor(_aten.arange.default(n, dtype=torch.int64, device=input.device),
                                               height * width), [n, 1, 1])
    indices, valid = [], []
    for y, x, _, _ in corners:
        ok = _aten.logical_and.default(
            _aten.logical_and.default(_aten.ge.Scalar(x, 0), _aten.lt.Scalar(x, width)),
            _aten.logical_and.default(_aten.ge.Scalar(y, 0), _aten.lt.Scalar(y, height)))
        at = _aten.add.Tensor(_aten.mul.Tensor(y, width), x)
        at = _aten.where.self(ok, at, _aten.zeros_like.default(at))  # outside: any valid index, weight 0
        indices.append(_aten.add.Tensor(flat(_aten._to_copy.default(at, dtype=torch.int64)), base))
        valid.append(flat(_aten._to_copy.default(ok, dtype=dtype)))
    g = _aten.reshape.default(grad_output, [n, c, points])
    grad_input = grad_grid = None
    if output_mask[0]:
        spread = [_aten.mul.Tensor(g, _aten.mul.Tensor(flat(_aten.mul.Tensor(wy, wx)), ok))
                  for (_, _, wy, wx), ok in zip(corners, valid, strict=True)]
        index = _aten.reshape.default(_aten.cat.default(indices, 2), [n * 4 * points])
        columns = _aten.reshape.default(_aten.permute.default(_aten.cat.default(spread, 2), [1, 0, 2]), [c, n * 4 * points])
        zeros = _aten.new_zeros.default(input, [c, n * height * width])
        summed = _aten.index_add.default(zeros, 1, index, columns)
        grad_input = _aten.permute.default(_aten.view.default(summed, [c, n, height, width]), [1, 0, 2, 3])
    if output_mask[1]:
        source = _aten.reshape.default(_aten.permute.default(input, [1, 0, 2, 3]), [c, n * height * width])

        def corner_values(at):  # [n, c, points]
            picked = _aten.index_select.default(source, 1, _aten.reshape.default(at, [n * points]))
            return _aten.permute.default(_aten.view.default(picked, [c, n, points]), [1, 0, 2])

        values = [_aten.mul.Tensor(corner_values(at), ok) for at, ok in zip(indices, valid, strict=True)]
        nw, ne, sw, se = (_aten.sum.dim_IntList(_aten.mul.Tensor(v, g), [1]) for v in values)  # [n, points]
        wx0f, wx1f, wy0f, wy1f = (_aten.view.default(t, [n, points]) for t in (wx0, wx1, wy0, wy1))
        gix = _aten.add.Tensor(_aten.mul.Tensor(_aten.sub.Tensor(ne, nw), wy0f), _aten.mul.Tensor(_aten.sub.Tensor(se, sw), wy1f))
        giy = _aten.add.Tensor(_aten.mul.Tensor(_aten.sub.Tensor(sw, nw), wx0f), _aten.mul.Tensor(_aten.sub.Tensor(se, ne), wx1f))
        gix = _aten.mul.Tensor(_aten.view.default(gix, [n, out_h, out_w]), gx_mult)
        giy = _aten.mul.Tensor(_aten.view.default(giy, [n, out_h, out_w]), gy_mult)
        grad_grid = _aten.stack.default([gix, giy], 3)
    if grad_input is not None:
        grad_input = _aten._to_copy.default(grad_input, dtype=given[0])
    if grad_grid is not None:
        grad_grid = _aten._to_copy.default(grad_grid, dtype=given[1])
    return grad_input, grad_grid


def grid_sampling_decompositions() -> dict:
    return {_aten.grid_sampler_2d_backward.default: grid_sampler_2d_backward_as_gathers}


__all__ = ["grid_sampler_2d_backward_as_gathers", "grid_sampling_decompositions"]
