"""Pooling in forms that torch-mlir lowers, and IREE compiles, correctly and completely.

* **ceil_mode** — torch-mlir 20261001's StableHLO lowering of ``aten.max_pool2d_with_indices``
  with ``ceil_mode=True`` pads the ``stablehlo.reduce_window`` on *both* sides by the extra
  amount the ceiling needs (``padding = [[1, 1], [1, 1]]`` for a 3x3/stride-2 pool of 22x22
  with ``padding=0``), where PyTorch only extends the window grid at the end (low 0, high 1).
  Every output window is then shifted up and left by one position: SqueezeNet 1.0's second
  pool (22x22 -> 11x11) made its features differ by up to 3.6 from the CPU. Minimal
  reproducer, ``max_pool2d(relu(x), 3, 2, ceil_mode=True)`` for ``x: [2, 4, 22, 22]``, lowers to::

      "stablehlo.reduce_window"(%0, %-inf) <{padding = dense<[[0, 0], [0, 0], [1, 1], [1, 1]]>,
          window_dimensions = array<i64: 1, 1, 3, 3>, window_strides = array<i64: 1, 1, 2, 2>}>

  That is the lowering when only the values are used; when the indices are used too (a
  two-result ``reduce_window``) it adds no padding at all and fails to lower ("inferred type(s)
  'tensor<2x4x10x10xf32>' ... incompatible with return type(s) 'tensor<2x4x11x11xf32>'").
  Which of the two a model meets depended on the partitioner's per-op verdict: SqueezeNet's
  first pool (45 -> 22, no partial window) lowers, so the op counts as supported and the second
  one is compiled, values only, wrongly. (A lone pool node is never compiled — regions of one
  node run eagerly — so the bug shows only when the pool is fused with its producer.) :func:`max_pool2d_ceil_mode` makes the
  ceiling explicit instead: the input is padded with ``-inf`` at the bottom/right by exactly
  what the ceiling adds, then pooled with ``ceil_mode=False``, and the indices (positions in
  the padded width) are mapped back to the input's width.
* **unit windows** — ``avg_pool2d(x, 1, 2)`` (NASNet/PNASNet's factorized reductions) lowers to
  a ``stablehlo.reduce_window`` with a 1x1 window and stride 2. When its input is also a result
  of the program, IREE 3.13 writes that result only at the strided positions the pool reads and
  leaves the others zero (``(y, avg_pool2d(y, 1, 2))`` for ``y = x * 2``: every odd row and
  column of ``y`` came back 0, under every flag set we tried, on both drivers). A pool whose
  window is one element is a strided slice (divided by ``divisor_override`` if one is given);
  :func:`avg_pool_unit_window` writes it as one.
* **backward** — torch-mlir does not lower ``aten.max_pool2d_with_indices_backward``, so each
  one ran eagerly and split a CNN's backward graph in two regions. PyTorch's decomposition
  (a ``scatter_add`` of the output gradient into the forward's indices) lowers to
  ``stablehlo.scatter``.
"""

from __future__ import annotations

import functools

import torch

_aten = torch.ops.aten


def _spatial(v, dims: int, default: list[int] | None = None) -> list[int]:
    """A pooling argument (an int, or a list of one or ``dims`` ints; empty: ``default``) as ``dims`` ints."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v and default is not None:
        v = list(default)
    return v * dims if len(v) == 1 else v


def pooled_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``: with ``ceil_mode`` the last window must start inside
    the input or its left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def max_pool2d_ceil_mode(x: torch.Tensor, kernel_size, stride=(), padding=(0,), dilation=(1,),
                         ceil_mode: bool = False):
    """``max_pool2d_with_indices`` with ``ceil_mode=True`` as a ``-inf`` pad and a floor-mode
    pool (see the module docstring); other calls are left to the op itself."""
    if not ceil_mode:
        return NotImplemented
    kernel = _spatial(kernel_size, 2)
    strides = _spatial(stride, 2, kernel)
    pads, dils = _spatial(padding, 2), _spatial(dilation, 2)
    h, w = x.shape[-2], x.shape[-1]
    extra = []
    for size, k, s, p, d in zip((h, w), kernel, strides, pads, dils, strict=True):
        out = pooled_size(size, k, s, p, d, True)
        extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
    if extra == [0, 0]:  # the ceiling adds no window: floor mode gives the same result
        return _aten.max_pool2d_with_indices.default(x, kernel, strides, pads, dils, False)
    fill = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
    padded = _aten.constant_pad_nd.default(x, [0, extra[1], 0, extra[0]], fill)
    values, indices = _aten.max_pool2d_with_indices.default(padded, kernel, strides, pads, dils, False)
    if extra[1]:  # a position in the padded rows of width w + extra, as a position in rows of width w
        wide = w + extra[1]
        indices = _aten.add.Tensor(_aten.mul.Tensor(_aten.div.Tensor_mode(indices, wide, rounding_mode="floor"), w),
                                   _aten.remainder.Scalar(indices, wide))
    return values, indices


def avg_pool_unit_window(x: torch.Tensor, kernel_size, stride=(), padding=(0,), ceil_mode: bool = False,
                         count_include_pad: bool = True, divisor_override=None, *, dims: int = 2):
    """``avg_pool2d`` (``dims=3``: ``avg_pool3d``) with a one-element window and no padding as
    a strided slice (see the module docstring); other calls are left to the op itself."""
    kernel = _spatial(kernel_size, dims)
    strides = _spatial(stride, dims, kernel)
    if any(k != 1 for k in kernel) or any(_spatial(padding, dims)):
        return NotImplemented
    out = x
    for i, s in enumerate(strides):
        dim = x.dim() - dims + i
        n = pooled_size(x.shape[dim], 1, s, 0, 1, ceil_mode)
        out = _aten.slice.Tensor(out, dim, 0, (n - 1) * s + 1, s)
    if divisor_override not in (None, 1):
        return _aten.div.Tensor(out, divisor_override)
    return _aten.clone.default(out)  # a pool's result is a new tensor, not a view of its input


def pooling_decompositions() -> dict:
    from torch._decomp import get_decompositions

    table = {_aten.max_pool2d_with_indices.default: max_pool2d_ceil_mode,
             _aten.avg_pool2d.default: avg_pool_unit_window,
             _aten.avg_pool3d.default: functools.partial(avg_pool_unit_window, dims=3)}
    table.update(get_decompositions([_aten.max_pool2d_with_indices_backward]))
    return table


__all__ = ["avg_pool_unit_window", "max_pool2d_ceil_mode", "pooled_size", "pooling_decompositions"]
