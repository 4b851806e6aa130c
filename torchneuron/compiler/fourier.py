"""Fourier transforms as DFT matrix products, on the float pairs of ``complex_pairs.py``.

IREE compiles no FFT for the CPU target and torch-mlir lowers none of ATen's ``_fft_*`` ops, so
every transform (FNet's token mixing, Autoformer's auto-correlation, the codecs' spectral losses)
ran through the CPU fallback between compiled regions. The NeuronCore has no FFT unit either; what
it has is a matrix engine, and a transform of length n is a product with the n×n DFT matrix
(``cos`` and ``sin`` of 2πjk/n), so these rules rewrite each one-dimensional transform into ``mm``
nodes on the real and imaginary parts; the matrices are computed in the graph from ``arange``
(exactly: jk mod n in integers before the angle is formed).

A product costs O(n²) per transformed row where an FFT costs O(n log n), and rounds like a sum of n
terms (float32: relative errors of ~1e-6 for n in the hundreds against ~1e-7). Transforms longer
than :data:`MAX_LENGTH` are left as they are (their matrices would take 4n² bytes each).

* ``_fft_r2c(x, dims, norm, onesided)``: the last of ``dims`` real to complex (n//2+1 outputs when
  ``onesided``), the other dims complex to complex.
* ``_fft_c2c(z, dims, norm, forward)``: each dim complex to complex, sign by ``forward``.
* ``_fft_c2r(z, dims, norm, n)``: the other dims inverse complex to complex, then the last one to n
  real outputs from its n//2+1 Hermitian half (bins other than 0 and n/2 counted twice).

``norm`` is ATen's: 0 none, 1 by 1/sqrt(N), 2 by 1/N, N the product of the signal lengths.
"""

from __future__ import annotations

import math

import torch
from torch import fx

_aten = torch.ops.aten
_prims = torch.ops.prims

MAX_LENGTH = 2048


def _dim(node: fx.Node, d: int) -> int:
    n = node.meta["val"].dim()
    return d + n if d < 0 else d


def _angles(r, n: int, rows: int, cols: int, device) -> fx.Node:
    """2π·((j·k) mod n)/n for j < rows, k < cols, as float32 [rows, cols]."""
    j = r.emit(_aten.arange.default, rows, dtype=torch.int64, device=device)
    k = r.emit(_aten.arange.default, cols, dtype=torch.int64, device=device)
    jk = r.emit(_aten.mul.Tensor, r.emit(_aten.unsqueeze.default, j, 1), r.emit(_aten.unsqueeze.default, k, 0))
    turns = r.emit(_prims.convert_element_type.default, r.emit(_aten.remainder.Scalar, jk, n), torch.float32)
    return r.emit(_aten.mul.Tensor, turns, 2 * math.pi / n)


def _along(r, t: fx.Node, d: int, product) -> fx.Node:
    """``product`` (a function of a 2-D node [rows, length]) applied along dim ``d`` of ``t``."""
    shape = list(t.meta["val"].shape)
    nd = len(shape)
    perm = [i for i in range(nd) if i != d] + [d]
    moved = t if perm == list(range(nd)) else r.emit(_aten.permute.default, t, perm)
    moved = r.emit(_aten.clone.default, moved, memory_format=torch.contiguous_format)
    flat = r.emit(_aten.view.default, moved, [-1, shape[d]])
    out = product(flat)
    width = out.meta["val"].shape[-1]
    out = r.emit(_aten.view.default, out, [*(shape[i] for i in perm[:-1]), width])
    if perm == list(range(nd)):
        return out
    inverse = sorted(range(nd), key=perm.__getitem__)
    return r.emit(_aten.permute.default, out, inverse)


def _mm(r, a: fx.Node, b: fx.Node) -> fx.Node:
    return r.emit(_aten.mm.default, a, b)


def _c2c_dim(r, re: fx.Node, im: fx.Node, d: int, forward: bool, device) -> tuple[fx.Node, fx.Node]:
    """One complex-to-complex DFT along ``d``: X_k = Σ_j x_j e^(∓2πi jk/n)."""
    n = re.meta["val"].shape[d]
    ang = _angles(r, n, n, n, device)
    cos, sin = r.emit(_aten.cos.default, ang), r.emit(_aten.sin.default, ang)
    # forward: (re·cos + im·sin) + i(im·cos − re·sin); inverse: the signs of the sin terms flipped
    rc, rs = _along(r, re, d, lambda x: _mm(r, x, cos)), _along(r, re, d, lambda x: _mm(r, x, sin))
    ic, is_ = _along(r, im, d, lambda x: _mm(r, x, cos)), _along(r, im, d, lambda x: _mm(r, x, sin))
    if forward:
        return r.emit(_aten.add.Tensor, rc, is_), r.emit(_aten.sub.Tensor, ic, rs)
    return r.emit(_aten.sub.Tensor, rc, is_), r.emit(_aten.add.Tensor, ic, rs)


def _normalised(r, t: fx.Node, norm: int, signal: int) -> fx.Node:
    if norm == 0:
        return t
    return r.emit(_aten.mul.Tensor, t, 1 / math.sqrt(signal) if norm == 1 else 1 / signal)


def _lengths_ok(lengths) -> bool:
    return all(isinstance(n, int) and 0 < n <= MAX_LENGTH for n in lengths)


def fft_r2c(r, node: fx.Node):
    x, dims, norm, onesided = node.args
    val = x.meta["val"]
    if val.dtype != torch.float32 or node.meta["val"].dtype != torch.complex64:
        return None
    dims = [_dim(x, d) for d in dims]
    if not _lengths_ok([val.shape[d] for d in dims]):
        return None
    last = dims[-1]
    n = val.shape[last]
    width = n // 2 + 1 if onesided else n
    ang = _angles(r, n, n, width, val.device)
    cos, sin = r.emit(_aten.cos.default, ang), r.emit(_aten.sin.default, ang)
    re = _along(r, x, last, lambda t: _mm(r, t, cos))
    im = r.emit(_aten.neg.default, _along(r, x, last, lambda t: _mm(r, t, sin)))
    for d in dims[:-1]:
        re, im = _c2c_dim(r, re, im, d, True, val.device)
    signal = math.prod(val.shape[d] for d in dims)
    return _normalised(r, r.stack(re, im), norm, signal)


def fft_c2c(r, node: fx.Node):
    z, dims, norm, forward = node.args
    val = z.meta["val"]
    if val.dtype != torch.complex64:
        return None
    dims = [_dim(z, d) for d in dims]
    if not _lengths_ok([val.shape[d] for d in dims]):
        return None
    re, im = r.parts(z)
    for d in dims:
        re, im = _c2c_dim(r, re, im, d, bool(forward), val.device)
    return _normalised(r, r.stack(re, im), norm, math.prod(val.shape[d] for d in dims))


def fft_c2r(r, node: fx.Node):
    """The result is real: the node's users take it directly (``complex_as_pairs``: the rule of a
    real-valued node returns that value, not a pair)."""
    z, dims, norm, n = node.args
    val = z.meta["val"]
    if val.dtype != torch.complex64:
        return None
    dims = [_dim(z, d) for d in dims]
    last = dims[-1]
    width = n // 2 + 1
    if not _lengths_ok([val.shape[d] for d in dims[:-1]] + [n]) or val.shape[last] < width:
        return None
    re, im = r.parts(z)
    for d in dims[:-1]:
        re, im = _c2c_dim(r, re, im, d, False, val.device)
    if val.shape[last] > width:
        re = r.emit(_aten.slice.Tensor, re, last, 0, width)
        im = r.emit(_aten.slice.Tensor, im, last, 0, width)
    # x_j = Σ_k w_k (Re X_k cos θ − Im X_k sin θ), θ = 2πjk/n, w_k = 1 for k = 0 and k = n/2, else 2
    ang = _angles(r, n, width, n, val.device)
    k = r.emit(_aten.arange.default, width, dtype=torch.int64, device=val.device)
    single = r.emit(_aten.logical_or.default, r.emit(_aten.eq.Scalar, k, 0),
                    r.emit(_aten.eq.Scalar, r.emit(_aten.mul.Tensor, k, 2), n))
    weight = r.emit(_aten.unsqueeze.default, r.emit(_aten.where.ScalarOther,
                                                    single, r.emit(_aten.full.default, [width], 1.0,
                                                                   dtype=torch.float32, device=val.device),
                                                    2.0), 1)
    cos = r.emit(_aten.mul.Tensor, r.emit(_aten.cos.default, ang), weight)
    sin = r.emit(_aten.mul.Tensor, r.emit(_aten.sin.default, ang), weight)
    out = r.emit(_aten.sub.Tensor, _along(r, re, last, lambda t: _mm(r, t, cos)),
                 _along(r, im, last, lambda t: _mm(r, t, sin)))
    signal = math.prod([val.shape[d] for d in dims[:-1]] + [n])
    return _normalised(r, out, norm, signal)


def to_complex(r, node: fx.Node):
    """A real tensor converted to complex64 (``convert_element_type``, ``_to_copy``): its pair is
    the value beside zeros."""
    x = node.args[0]
    val = x.meta["val"]
    if node.meta["val"].dtype != torch.complex64 or val.dtype.is_complex:
        return None
    if node.target is _aten._to_copy.default and set(node.kwargs) - {"dtype", "device", "layout"}:
        return None
    re = x if val.dtype == torch.float32 else r.emit(_prims.convert_element_type.default, x, torch.float32)
    return r.stack(re, r.emit(_aten.zeros_like.default, re))


FFT_RULES = {
    _aten._fft_r2c.default: fft_r2c,
    _aten._fft_c2c.default: fft_c2c,
    _aten._fft_c2r.default: fft_c2r,
    _prims.convert_element_type.default: to_complex,
    _aten._to_copy.default: to_complex,
}
