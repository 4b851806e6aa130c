"""RMSNorm in NKI (current dialect): forward and backward kernels, and the ``torch`` op.

``y = x * rsqrt(mean(x^2, -1) + eps) * w`` over the last dim. Rows are tiled 128 to a tile
(partition dim), the whole hidden dim ``D`` sits on the free axis; a ragged last tile uses
fewer partitions. All statistics are float32; ``y``/``dx`` are rounded to ``x``'s dtype and
``dw`` to ``w``'s dtype only when written.
"""

from __future__ import annotations

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128  # partitions per tile
SPMD = 2  # programs per launch of the row-parallel kernels
_CHUNK = 512  # matmul moving free size limit (dw reduction over rows)


def _rstd(t, p, d, eps):
    """rstd[p, 1] = rsqrt(sum(t^2) / d + eps), on the Scalar Engine (square with fused row sum)."""
    sq = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
    ss = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(sq, nl.square, t, reduce_op=nl.add, reduce_res=ss)
    rstd = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(rstd, nl.rsqrt, ss, scale=1.0 / d, bias=eps)
    return rstd


@nki.jit
def rmsnorm_fwd_kernel(x, w, eps=1e-6):
    """x [N, D], w [1, D] -> y [N, D] (x's dtype)."""
    n, d = x.shape
    out = nl.ndarray((n, d), x.dtype, buffer=nl.shared_hbm)
    wt = nl.ndarray((1, d), w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(wt, w)
    wb = nl.broadcast_to(wt, (P, d))  # w on every partition, once per launch
    # SPMD: program k of the grid takes row tiles k, k + G, ... (launch with [2] to use
    # both physical cores of an LNC=2 logical core)
    for i in nl.affine_range(nl.program_id(0), (n + P - 1) // P, nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0 : r0 + p, :])
        rstd = _rstd(t, p, d, eps)
        y = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        # y = (x * rstd) * w in one Vector Engine pass
        nisa.scalar_tensor_tensor(y, t, nl.multiply, rstd, nl.multiply, wb[0:p, :])
        nisa.dma_copy(out[r0 : r0 + p, :], y)
    return out


@nki.jit
def rmsnorm_bwd_kernel(g, x, w, eps=1e-6):
    """g, x [N, D], w [1, D] -> (dx [N, D] in x's dtype, dw [1, D] in w's dtype).

    dx = rstd * (g*w) - x * rstd^3 * sum(g*w*x) / D;   dw = sum_rows(g * x * rstd).
    The row sum for dw runs on the Tensor Engine (ones[p, 1] stationary contracts the
    partition dim) into PSUM, then accumulates in an fp32 SBUF row."""
    n, d = x.shape
    dx_out = nl.ndarray((n, d), x.dtype, buffer=nl.shared_hbm)
    dw_out = nl.ndarray((1, d), w.dtype, buffer=nl.shared_hbm)
    wt = nl.ndarray((1, d), w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(wt, w)
    wb = nl.broadcast_to(wt, (P, d))
    ones = nl.ones((P, 1), nl.float32, buffer=nl.sbuf)
    dw_acc = nl.zeros((1, d), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range((n + P - 1) // P):  # dw_acc carries across iterations
        r0 = i * P
        p = min(P, n - r0)
        t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        gt = nl.ndarray((p, d), g.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0 : r0 + p, :])
        nisa.dma_copy(gt, g[r0 : r0 + p, :])
        rstd = _rstd(t, p, d, eps)
        gw = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(gw, gt, wb[0:p, :], nl.multiply)
        prod = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(prod, gw, t, nl.multiply)
        dot = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dot, nl.add, prod, axis=1, keepdims=True)
        # c = -dot * rstd^3 / d
        r2 = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(r2, rstd, rstd, nl.multiply)
        c = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(c, dot, nl.multiply, -1.0 / d, nl.multiply, r2)
        nisa.tensor_tensor(c, c, rstd, nl.multiply)
        # dx = gw * rstd + x * c
        a = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(a, gw, nl.multiply, rstd)
        dx = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dx, t, nl.multiply, c, nl.add, a)
        nisa.dma_copy(dx_out[r0 : r0 + p, :], dx)
        # dw += sum over the tile's rows of g * x * rstd
        gxn = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(gxn, t, nl.multiply, rstd, nl.multiply, gt)
        for c0 in nl.static_range(0, d, _CHUNK):
            cw = min(_CHUNK, d - c0)
            ps = nl.ndarray((1, cw), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps, ones[0:p, :], gxn[:, c0 : c0 + cw])
            nisa.tensor_tensor(dw_acc[:, c0 : c0 + cw], dw_acc[:, c0 : c0 + cw], ps, nl.add)
    dw = nl.ndarray((1, d), w.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dw, dw_acc)
    nisa.dma_copy(dw_out, dw)
    return dx_out, dw_out


# ---- torch ops ----------------------------------------------------------------------------------
def _bwd_fake(g, x, w, eps=1e-6):
    return torch.empty_like(x), torch.empty_like(w)


rmsnorm_bwd = nki_op("torchneuron::nki_rmsnorm_bwd", rmsnorm_bwd_kernel, num_outputs=2, fake=_bwd_fake)


def _setup(ctx, inputs, output):
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    dx, dw = rmsnorm_bwd(grad.contiguous(), x, w, ctx.eps)
    return dx, dw, None


rmsnorm_fwd = nki_op(
    "torchneuron::nki_rmsnorm",
    rmsnorm_fwd_kernel,
    grid=SPMD,
    backward=_backward,
    setup_context=_setup,
)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any leading dims) with ``weight`` of shape [D],
    through the NKI kernel (``torch.ops.torchneuron.nki_rmsnorm``); differentiable."""
    d = x.shape[-1]
    y = rmsnorm_fwd(x.reshape(-1, d), weight.reshape(1, d), float(eps))
    return y.reshape(x.shape)
