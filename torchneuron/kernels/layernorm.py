"""LayerNorm in NKI (current dialect): forward and backward kernels, and the ``torch`` op.

``y = (x - mean) * rstd * w + b`` over the last dim, ``rstd = rsqrt(var + eps)`` (population
variance, as ``F.layer_norm``). Rows tile 128 to a tile on the partition dim, the hidden dim
``D`` on the free axis. Mean and variance come from the Vector Engine's ``bn_stats`` (over
chunks of at most 512 elements) and ``bn_aggr``; normalisation runs on the Scalar Engine as
one ``activation(x * rstd + (-mean * rstd))``. Statistics are float32; outputs are rounded to
their dtype only when written.
"""

from __future__ import annotations

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128
SPMD = 2
_CHUNK = 512  # bn_stats elements per partition; matmul moving free size (row sums)


def _normalized(t, p, d, eps):
    """(xhat [p, d] fp32, rstd [p, 1]) for the rows of tile ``t``."""
    nch = (d + _CHUNK - 1) // _CHUNK
    stats = nl.ndarray((p, 6 * nch), nl.float32, buffer=nl.sbuf)
    for c in nl.static_range(nch):
        c0 = c * _CHUNK
        nisa.bn_stats(stats[:, 6 * c : 6 * c + 6], t[:, c0 : min(d, c0 + _CHUNK)])
    mv = nl.ndarray((p, 2), nl.float32, buffer=nl.sbuf)  # (mean, var)
    nisa.bn_aggr(mv, stats)
    rstd = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(rstd, nl.rsqrt, mv[:, 1:2], bias=eps)
    shift = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)  # -mean * rstd
    nisa.scalar_tensor_tensor(shift, mv[:, 0:1], nl.multiply, -1.0, nl.multiply, rstd)
    xhat = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
    nisa.activation(xhat, nl.copy, t, scale=rstd, bias=shift)
    return xhat, rstd


def _broadcast_row(src, d):
    """A [1, D] HBM vector on all 128 partitions (once per launch)."""
    row = nl.ndarray((1, d), src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(row, src)
    return nl.broadcast_to(row, (P, d))


@nki.jit
def layernorm_fwd_kernel(x, w, b, eps=1e-5):
    """x [N, D], w/b [1, D] -> y [N, D] (x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), x.dtype, buffer=nl.shared_hbm)
    wb = _broadcast_row(w, d)
    bb = _broadcast_row(b, d)
    for i in nl.affine_range(nl.program_id(0), (n + P - 1) // P, nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0 : r0 + p, :])
        xhat, _ = _normalized(t, p, d, eps)
        yw = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(yw, xhat, wb[0:p, :], nl.multiply)
        y = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(y, yw, bb[0:p, :], nl.add)
        nisa.dma_copy(out[r0 : r0 + p, :], y)
    return out


@nki.jit
def layernorm_bwd_kernel(g, x, w, eps=1e-5):
    """g, x [N, D], w [1, D] -> (dx [N, D], dw [1, D], db [1, D]).

    dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)); dw = sum_rows(g * xhat);
    db = sum_rows(g). Row sums run on the Tensor Engine (a ones[p, 1] stationary contracts
    the partition dim) and accumulate in fp32 SBUF rows."""
    n, d = x.shape
    dx_out = nl.ndarray((n, d), x.dtype, buffer=nl.shared_hbm)
    dw_out = nl.ndarray((1, d), w.dtype, buffer=nl.shared_hbm)
    db_out = nl.ndarray((1, d), w.dtype, buffer=nl.shared_hbm)
    wb = _broadcast_row(w, d)
    ones = nl.ones((P, 1), nl.float32, buffer=nl.sbuf)
    dw_acc = nl.zeros((1, d), nl.float32, buffer=nl.sbuf)
    db_acc = nl.zeros((1, d), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range((n + P - 1) // P):  # dw/db accumulate across row tiles
        r0 = i * P
        p = min(P, n - r0)
        t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        gt = nl.ndarray((p, d), g.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0 : r0 + p, :])
        nisa.dma_copy(gt, g[r0 : r0 + p, :])
        xhat, rstd = _normalized(t, p, d, eps)
        gw = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        s1 = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)  # sum(g*w)
        nisa.tensor_tensor(gw, gt, wb[0:p, :], nl.multiply)
        nisa.tensor_reduce(s1, nl.add, gw, axis=1, keepdims=True)
        prod = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        s2 = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)  # sum(g*w*xhat)
        nisa.tensor_tensor(prod, gw, xhat, nl.multiply)
        nisa.tensor_reduce(s2, nl.add, prod, axis=1, keepdims=True)
        c2 = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(c2, s2, nl.multiply, -1.0 / d)
        c1 = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(c1, s1, nl.multiply, -1.0 / d)
        tmp = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)  # gw - xhat * mean(gw*xhat)
        nisa.scalar_tensor_tensor(tmp, xhat, nl.multiply, c2, nl.add, gw)
        dx = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)  # (tmp - mean(gw)) * rstd
        nisa.tensor_scalar(dx, tmp, nl.add, c1, op1=nl.multiply, operand1=rstd)
        nisa.dma_copy(dx_out[r0 : r0 + p, :], dx)
        gx = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(gx, gt, xhat, nl.multiply)
        for c0 in nl.static_range(0, d, _CHUNK):
            cw = min(_CHUNK, d - c0)
            ps_w = nl.ndarray((1, cw), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps_w, ones[0:p, :], gx[:, c0 : c0 + cw])
            nisa.tensor_tensor(dw_acc[:, c0 : c0 + cw], dw_acc[:, c0 : c0 + cw], ps_w, nl.add)
            ps_b = nl.ndarray((1, cw), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps_b, ones[0:p, :], gt[:, c0 : c0 + cw])
            nisa.tensor_tensor(db_acc[:, c0 : c0 + cw], db_acc[:, c0 : c0 + cw], ps_b, nl.add)
    for acc, dst in ((dw_acc, dw_out), (db_acc, db_out)):
        r = nl.ndarray((1, d), w.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(r, acc)
        nisa.dma_copy(dst, r)
    return dx_out, dw_out, db_out


# ---- torch ops ----------------------------------------------------------------------------------
def _bwd_fake(g, x, w, eps=1e-5):
    return torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)


layernorm_bwd = nki_op("torchneuron::nki_layernorm_bwd", layernorm_bwd_kernel, num_outputs=3, fake=_bwd_fake)


def _setup(ctx, inputs, output):
    x, w, b, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    dx, dw, db = layernorm_bwd(grad.contiguous(), x, w, ctx.eps)
    return dx, dw, db, None


layernorm_fwd = nki_op(
    "torchneuron::nki_layernorm", layernorm_fwd_kernel, grid=SPMD, backward=_backward, setup_context=_setup
)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim of ``x`` (any leading dims) with ``weight``/``bias`` of
    shape [D], through the NKI kernel (``torch.ops.torchneuron.nki_layernorm``);
    differentiable in ``x``, ``weight`` and ``bias``."""
    d = x.shape[-1]
    y = layernorm_fwd(x.reshape(-1, d).contiguous(), weight.reshape(1, d), bias.reshape(1, d), float(eps))
    return y.reshape(x.shape)
