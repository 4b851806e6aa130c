"""Softmax over the last dim in NKI (current dialect): forward and backward kernels, and the
``torch`` op. Rows tile 128 to a tile on the partition dim (a ragged last tile uses fewer
partitions); the row max, the exponentials and the row sums are float32."""

from __future__ import annotations

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128
SPMD = 2  # programs per launch (both physical cores of an LNC=2 logical core)


@nki.jit
def softmax_fwd_kernel(x):
    """x [N, D] -> softmax(x, -1) [N, D] in x's dtype."""
    n, d = x.shape
    out = nl.ndarray((n, d), x.dtype, buffer=nl.shared_hbm)
    # SPMD: program k of the grid takes row tiles k, k + G, ... (launch with [2] to use
    # both physical cores of an LNC=2 logical core)
    for i in nl.affine_range(nl.program_id(0), (n + P - 1) // P, nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0 : r0 + p, :])
        neg_max = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(neg_max, nl.max, t, axis=1, negate=True, keepdims=True)
        e = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        # exp(x - max) on the Scalar Engine with the row sum fused in
        nisa.activation(e, nl.exp, t, bias=neg_max, reduce_op=nl.add, reduce_res=s)
        inv = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(inv, s)
        y = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(y, e, nl.multiply, inv)
        nisa.dma_copy(out[r0 : r0 + p, :], y)
    return out


@nki.jit
def softmax_bwd_kernel(g, y):
    """g, y [N, D] -> dx = y * (g - sum(g * y, -1)) in y's dtype."""
    n, d = y.shape
    out = nl.ndarray((n, d), y.dtype, buffer=nl.shared_hbm)
    # SPMD: program k of the grid takes row tiles k, k + G, ... (launch with [2] to use
    # both physical cores of an LNC=2 logical core)
    for i in nl.affine_range(nl.program_id(0), (n + P - 1) // P, nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        gt = nl.ndarray((p, d), g.dtype, buffer=nl.sbuf)
        yt = nl.ndarray((p, d), y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(gt, g[r0 : r0 + p, :])
        nisa.dma_copy(yt, y[r0 : r0 + p, :])
        prod = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(prod, gt, yt, nl.multiply)
        dot = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dot, nl.add, prod, axis=1, keepdims=True)
        dx = nl.ndarray((p, d), y.dtype, buffer=nl.sbuf)
        # (g - dot) * y in one Vector Engine pass
        nisa.scalar_tensor_tensor(dx, gt, nl.subtract, dot, nl.multiply, yt)
        nisa.dma_copy(out[r0 : r0 + p, :], dx)
    return out


softmax_bwd = nki_op("torchneuron::nki_softmax_bwd", softmax_bwd_kernel, like=1, grid=SPMD)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return softmax_bwd(grad.contiguous(), y)


softmax_fwd = nki_op(
    "torchneuron::nki_softmax", softmax_fwd_kernel, grid=SPMD, backward=_backward, setup_context=_setup
)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``x`` over ``dim`` through the NKI kernel; differentiable."""
    moved = dim not in (-1, x.dim() - 1)
    if moved:
        x = x.movedim(dim, -1)
    d = x.shape[-1]
    y = softmax_fwd(x.reshape(-1, d)).reshape(x.shape)
    return y.movedim(-1, dim) if moved else y
