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
  Floating-point pools now take :func:`max_pool2d_as_taps` (next point), which pads for the
  ceiling itself; this decomposition remains for integer pools.
* **NaNs** — IREE 3.13's code for the two-result ``reduce_window`` (values and indices) drops
  NaNs; :func:`max_pool2d_as_taps` computes both as a running maximum over the window's taps.
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
  ``stablehlo.scatter``. Nor does it lower ``aten.avg_pool2d_backward`` (34 models of the
  compile-mode sweep ran it on the CPU, DenseNet's transitions among them):
  :func:`avg_pool2d_backward_as_taps` adds the output gradient, divided by each window's
  divisor, once per window tap, each a zero pad of the gradient spread to the stride;
  ``aten._adaptive_avg_pool2d_backward`` (VGG, AlexNet) is two matmuls with the windows'
  membership matrices (:func:`adaptive_avg_pool2d_backward_as_matmuls`).
* **3-d max pools** — torch-mlir lowers neither ``aten.max_pool3d_with_indices`` nor its
  backward (S3D and the MViTs ran both on the CPU, 9 to 39 calls per sweep check): the pool is
  the same running maximum over its taps (:func:`max_pool_as_taps`, ``dims=3``) and the backward
  a ``scatter_add`` into the flat indices (:func:`max_pool3d_backward_as_scatter`).
* **large average windows** — the taps of :func:`avg_pool2d_backward_as_taps` grow with the
  window, and torch-mlir lowers no ``aten.avg_pool3d_backward`` (S3D's head averages 2x7x7 =
  98 elements): :func:`avg_pool_backward_as_matmuls` contracts the divided output gradient with
  one 0/1 window-membership matrix per pooled dimension, whatever the window's size.
"""

from __future__ import annotations

import functools
import itertools
from math import prod

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


def _tap_positions(out: int, stride: int, pad: int, offset: int, device) -> torch.Tensor:
    """Input row (or column) read by tap ``offset`` of each of ``out`` windows (may be outside)."""
    return _aten.add.Tensor(_aten.mul.Tensor(torch.arange(out, device=device), stride), offset - pad)


def _flat_index(per_dim: list[torch.Tensor], sizes, outs) -> torch.Tensor:
    """Positions along each pooled dimension (one vector of ``outs[i]`` per dimension) as the
    flat index PyTorch's max pools return: ``(d * H + h) * W + w``, shaped ``outs``."""
    dims = len(per_dim)
    index = None
    for i, positions in enumerate(per_dim):
        shape = [1] * dims
        shape[i] = outs[i]
        term = _aten.view.default(_aten.mul.Tensor(positions, prod(sizes[i + 1:])), shape)
        index = term if index is None else _aten.add.Tensor(index, term)
    return index


def max_pool_as_taps(x: torch.Tensor, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode: bool = False,
                     *, dims: int = 2):
    """``max_pool2d_with_indices`` (``dims=3``: ``max_pool3d_with_indices``) of a floating-point
    tensor as a running maximum over the window's taps, each a strided slice of the
    ``-inf``-padded input: elementwise comparisons and selects, fused into one loop. PyTorch's
    CPU kernels are matched exactly, ties and NaNs included: a tap replaces the maximum when it
    is greater or NaN (so the last NaN wins, a ``-inf`` never does), starting from ``-inf`` at
    the window's first position inside the input. The ceiling of ``ceil_mode`` is more padding
    at the end.

    Why: torch-mlir lowers the 2-d op with its indices to a two-result
    ``stablehlo.reduce_window``, and IREE 3.13's code for it drops NaNs — in the windows
    holding one, values and indices differed from the CPU's (no NaN out), so a compiled
    training step hid a NaN that eager propagates
    (``test_compiled_max_pool_with_indices_is_the_cpu_kernels``); it does not lower the 3-d op
    at all (S3D and MViT ran it, and its backward, on the CPU between their compiled regions).
    Speed, this host: ResNet-18's stem pool with its producer and backward (8x64x32x32, 3x3/2)
    9.4 against 11.3 ms; values only (inference, where the index computation is dead code)
    1.6-1.7 against 1.0-1.3 ms."""
    if not x.is_floating_point():
        if dims == 2:
            return max_pool2d_ceil_mode(x, kernel_size, stride, padding, dilation, ceil_mode)
        return NotImplemented
    kernel = _spatial(kernel_size, dims)
    strides = _spatial(stride, dims, kernel)
    pads, dils = _spatial(padding, dims), _spatial(dilation, dims)
    sizes = tuple(x.shape[-dims:])
    geometry = list(zip(sizes, kernel, strides, pads, dils, strict=True))
    outs = [pooled_size(n, k, s, p, d, ceil_mode) for n, k, s, p, d in geometry]
    high = [max(0, (o - 1) * s + d * (k - 1) + 1 - (n + p)) for o, (n, k, s, p, d) in zip(outs, geometry, strict=True)]
    pad_arg: list[int] = []
    for i in reversed(range(dims)):  # constant_pad_nd pads the last dimension first
        pad_arg += [pads[i], high[i]]
    padded = _aten.constant_pad_nd.default(x, pad_arg, float("-inf"))
    # the window's first position inside the input: where PyTorch's kernel starts its index
    first = []
    for o, (_, _, s, p, d) in zip(outs, geometry, strict=True):
        start = _tap_positions(o, s, p, 0, x.device)
        before = _aten.clamp_min.default(_aten.neg.default(start), 0)  # positions before the input
        first.append(_aten.add.Tensor(start, _aten.mul.Tensor(_aten.div.Tensor_mode(
            _aten.add.Tensor(before, d - 1), d, rounding_mode="floor"), d)))
    lead = list(x.shape[:-dims])
    index = _aten.expand.default(_flat_index(first, sizes, outs), [*lead, *outs])
    value = _aten.full.default([*lead, *outs], float("-inf"), dtype=x.dtype, device=x.device)
    for taps in itertools.product(*(range(k) for k in kernel)):
        tap, positions = padded, []
        for i, t in enumerate(taps):
            o, (_, _, s, p, d) = outs[i], geometry[i]
            tap = _aten.slice.Tensor(tap, len(lead) + i, t * d, t * d + (o - 1) * s + 1, s)
            positions.append(_tap_positions(o, s, p, t * d, x.device))
        take = _aten.logical_or.default(_aten.gt.Tensor(tap, value), _aten.isnan.default(tap))
        value = _aten.where.self(take, tap, value)
        index = _aten.where.self(take, _flat_index(positions, sizes, outs), index)
    return value, index


def max_pool2d_as_taps(x: torch.Tensor, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode: bool = False):
    """``max_pool2d_with_indices`` as :func:`max_pool_as_taps`."""
    return max_pool_as_taps(x, kernel_size, stride, padding, dilation, ceil_mode, dims=2)


def max_pool3d_as_taps(x: torch.Tensor, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode: bool = False):
    """``max_pool3d_with_indices`` as :func:`max_pool_as_taps`."""
    return max_pool_as_taps(x, kernel_size, stride, padding, dilation, ceil_mode, dims=3)


def max_pool3d_backward_as_scatter(grad: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding, dilation,
                                   ceil_mode: bool, indices: torch.Tensor):
    """``max_pool3d_with_indices_backward``, which torch-mlir does not lower, as PyTorch's
    decomposition of the 2-d op does it: the output gradient scatter-added into the forward's
    flat indices (a position picked by several windows sums their gradients), in float32 for
    half-precision gradients."""
    if x.dim() not in (4, 5):
        return NotImplemented
    lead, sizes = list(x.shape[:-3]), list(x.shape[-3:])
    work = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
    rows = prod(lead)
    flat_grad = _aten._to_copy.default(_aten.reshape.default(grad, [rows, -1]), dtype=work)
    flat_index = _aten.reshape.default(indices, [rows, -1])
    total = _aten.zeros.default([rows, prod(sizes)], dtype=work, device=grad.device)
    total = _aten.scatter_add.default(total, 1, flat_index, flat_grad)
    return _aten._to_copy.default(_aten.view.default(total, lead + sizes), dtype=grad.dtype)


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


MAX_AVG_POOL_BACKWARD_TAPS = 64


def _window_counts(out: int, size: int, kernel: int, stride: int, pad: int, include_pad: bool, like: torch.Tensor):
    """Per output position along one dimension: how many input (``include_pad``: input or
    padding) positions its window covers -- ATen's ``avg_pool2d`` divisor factor, as a tensor."""
    start = _aten.sub.Tensor(_aten.mul.Tensor(_aten.arange.default(out, dtype=torch.int64, device=like.device),
                                              stride), pad)
    end = _aten.clamp_max.default(_aten.add.Tensor(start, kernel), size + pad)
    if not include_pad:
        start = _aten.clamp_min.default(start, 0)
        end = _aten.clamp_max.default(end, size)
    return _aten.sub.Tensor(end, start)


def avg_pool2d_backward_as_taps(grad: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding, ceil_mode: bool,
                                count_include_pad: bool, divisor_override=None):
    """``avg_pool2d_backward`` as a sum over the window's taps (see the module docstring).

    The output gradient is divided by each window's divisor (ATen's rule: the window clipped
    to the padded input, or to the input without ``count_include_pad``), spread to every
    ``stride``-th position by zero padding, and added once per tap at the tap's offset; pads
    with negative amounts crop what falls outside the input. Windows of more than
    ``MAX_AVG_POOL_BACKWARD_TAPS`` elements are left to the op."""
    if grad.dim() not in (3, 4):
        return NotImplemented
    kh, kw = _spatial(kernel_size, 2)
    sh, sw = _spatial(stride, 2, [kh, kw])
    ph, pw = _spatial(padding, 2)
    if kh * kw > MAX_AVG_POOL_BACKWARD_TAPS:
        return NotImplemented
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = grad.shape[-2], grad.shape[-1]
    work = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    g = _aten._to_copy.default(grad, dtype=work)
    if divisor_override:
        g = _aten.div.Tensor(g, divisor_override)
    else:
        rows = _window_counts(out_h, height, kh, sh, ph, count_include_pad, grad)
        cols = _window_counts(out_w, width, kw, sw, pw, count_include_pad, grad)
        divisor = _aten.mul.Tensor(_aten.unsqueeze.default(rows, 1), _aten.unsqueeze.default(cols, 0))
        g = _aten.div.Tensor(g, _aten._to_copy.default(divisor, dtype=work))
    lead = list(g.shape[:-2])
    if sh > 1 or sw > 1:  # g[i, j] at (i * sh, j * sw) of an (out_h * sh, out_w * sw) grid of zeros
        g = _aten.view.default(g, lead + [out_h, 1, out_w, 1])
        g = _aten.constant_pad_nd.default(g, [0, sw - 1, 0, 0, 0, sh - 1])
        g = _aten.view.default(g, lead + [out_h * sh, out_w * sw])
    total = None
    for a in range(kh):
        for b in range(kw):
            top, left = a - ph, b - pw  # where the tap's first window sits in the input
            tap = _aten.constant_pad_nd.default(
                g, [left, width - left - out_w * sw, top, height - top - out_h * sh])
            total = tap if total is None else _aten.add.Tensor(total, tap)
    return _aten._to_copy.default(total, dtype=grad.dtype)


def _fixed_windows(out: int, size: int, kernel: int, stride: int, pad: int, like: torch.Tensor,
                   dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: 1 where input position ``h`` lies in window ``i`` (from ``i * stride - pad``,
    ``kernel`` long), else 0; padding and the ceiling's partial windows simply cover no input."""
    start = _aten.sub.Tensor(_aten.mul.Tensor(_aten.arange.default(out, dtype=torch.int64, device=like.device),
                                              stride), pad)
    h = _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)
    offset = _aten.sub.Tensor(h, _aten.unsqueeze.default(start, 1))
    inside = _aten.logical_and.default(_aten.ge.Scalar(offset, 0), _aten.lt.Scalar(offset, kernel))
    return _aten._to_copy.default(inside, dtype=dtype)


def avg_pool_backward_as_matmuls(grad: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding,
                                 ceil_mode: bool, count_include_pad: bool, divisor_override=None, *, dims: int = 3):
    """``avg_pool3d_backward`` (``dims=2``: ``avg_pool2d_backward``) as one matmul per pooled
    dimension: the output gradient, divided by each window's divisor (ATen's rule, as in
    :func:`avg_pool2d_backward_as_taps`), times that dimension's window-membership matrix.
    Unlike the taps it costs the same for any window size (S3D's head pools a 2x7x7 window)."""
    if grad.dim() not in (dims + 1, dims + 2):
        return NotImplemented
    kernel = _spatial(kernel_size, dims)
    strides = _spatial(stride, dims, kernel)
    pads = _spatial(padding, dims)
    sizes, outs = list(x.shape[-dims:]), list(grad.shape[-dims:])
    work = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    g = _aten._to_copy.default(grad, dtype=work)
    if divisor_override:
        g = _aten.div.Tensor(g, divisor_override)
    else:
        divisor = None
        for i in range(dims):
            counts = _window_counts(outs[i], sizes[i], kernel[i], strides[i], pads[i], count_include_pad, grad)
            counts = _aten.view.default(counts, [outs[i]] + [1] * (dims - 1 - i))
            divisor = counts if divisor is None else _aten.mul.Tensor(divisor, counts)
        g = _aten.div.Tensor(g, _aten._to_copy.default(divisor, dtype=work))
    for i in range(dims):  # contract output positions of dimension i with its windows
        axis = g.dim() - dims + i
        order = [d for d in range(g.dim()) if d != axis] + [axis]
        windows = _fixed_windows(outs[i], sizes[i], kernel[i], strides[i], pads[i], grad, work)
        spread = _aten.matmul.default(_aten.permute.default(g, order), windows)
        g = _aten.permute.default(spread, [order.index(d) for d in range(g.dim())])
    return _aten._to_copy.default(g, dtype=grad.dtype)


def avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size, stride, padding, ceil_mode: bool,
                        count_include_pad: bool, divisor_override=None):
    """``avg_pool2d_backward``: the taps for windows of up to ``MAX_AVG_POOL_BACKWARD_TAPS``
    elements (cheaper on large feature maps), the membership matmuls for larger ones."""
    args = (grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if prod(_spatial(kernel_size, 2)) > MAX_AVG_POOL_BACKWARD_TAPS:
        return avg_pool_backward_as_matmuls(*args, dims=2)
    return avg_pool2d_backward_as_taps(*args)


def _adaptive_windows(out: int, size: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[out, size]``: 1 where input position ``h`` lies in adaptive window ``i`` (ATen's
    windows: ``floor(i * size / out)`` to ``ceil((i + 1) * size / out)``), else 0."""
    i = _aten.arange.default(out, dtype=torch.int64, device=like.device)
    start = _aten.div.Tensor_mode(_aten.mul.Tensor(i, size), out, rounding_mode="floor")
    end = _aten.div.Tensor_mode(_aten.add.Tensor(_aten.mul.Tensor(i, size), size + out - 1), out,
                                rounding_mode="floor")
    h = _aten.unsqueeze.default(_aten.arange.default(size, dtype=torch.int64, device=like.device), 0)
    inside = _aten.logical_and.default(_aten.ge.Tensor(h, _aten.unsqueeze.default(start, 1)),
                                       _aten.lt.Tensor(h, _aten.unsqueeze.default(end, 1)))
    return _aten._to_copy.default(inside, dtype=dtype)


def adaptive_avg_pool2d_backward_as_matmuls(grad: torch.Tensor, x: torch.Tensor):
    """``_adaptive_avg_pool2d_backward``, which torch-mlir does not lower (VGG and AlexNet pool
    a 2x2 feature map to 7x7 at the sweep's image size), as ``rows.T @ (grad / sizes) @ cols``
    with ``rows``/``cols`` the 0/1 window-membership matrices of the two dimensions."""
    if grad.dim() not in (3, 4):
        return NotImplemented
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = grad.shape[-2], grad.shape[-1]
    work = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    rows = _adaptive_windows(out_h, height, grad, work)
    cols = _adaptive_windows(out_w, width, grad, work)
    sizes = _aten.mul.Tensor(_aten.unsqueeze.default(_aten.sum.dim_IntList(rows, [1]), 1),
                             _aten.unsqueeze.default(_aten.sum.dim_IntList(cols, [1]), 0))
    g = _aten.div.Tensor(_aten._to_copy.default(grad, dtype=work), sizes)
    spread = _aten.matmul.default(_aten.matmul.default(_aten.t.default(rows), g), cols)
    return _aten._to_copy.default(spread, dtype=grad.dtype)


def pooling_decompositions() -> dict:
    from torch._decomp import get_decompositions

    table = {_aten.max_pool2d_with_indices.default: max_pool2d_as_taps,
             _aten.max_pool3d_with_indices.default: max_pool3d_as_taps,
             _aten.max_pool3d_with_indices_backward.default: max_pool3d_backward_as_scatter,
             _aten.avg_pool2d.default: avg_pool_unit_window,
             _aten.avg_pool3d.default: functools.partial(avg_pool_unit_window, dims=3),
             _aten.avg_pool2d_backward.default: avg_pool2d_backward,
             _aten.avg_pool3d_backward.default: avg_pool_backward_as_matmuls,
             _aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward_as_matmuls}
    table.update(get_decompositions([_aten.max_pool2d_with_indices_backward]))
    return table


__all__ = ["adaptive_avg_pool2d_backward_as_matmuls", "avg_pool2d_backward", "avg_pool2d_backward_as_taps",
           "avg_pool_backward_as_matmuls", "avg_pool_unit_window",
           "max_pool2d_as_taps", "max_pool2d_ceil_mode", "max_pool3d_as_taps", "max_pool3d_backward_as_scatter",
           "max_pool_as_taps", "pooled_size", "pooling_decompositions"]
