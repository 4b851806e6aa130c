"""SwiGLU MLP in NKI (current dialect): forward and backward kernels, and the ``torch`` op.

``y = (silu(x @ Wg) * (x @ Wu)) @ Wd`` with ``x [N, Dm]``, ``Wg``/``Wu [Dm, F]``,
``Wd [F, Dm]`` (the LLaMA/Mistral MLP; ``nn.Linear`` weights are the transposes).

Forward, per tile of 128 tokens: ``x^T`` (Tensor Engine transposes) is the moving operand of
the gate/up projections, computed transposed (``g^T = Wg^T x^T``, F on partitions) so that
``h^T = silu(g^T) * u^T`` is directly the stationary operand of the down projection; ``y``
accumulates over F in PSUM, 512 output columns per bank. The weights stay in SBUF.

Backward, per tile of 128 tokens (weight gradients accumulate in fp32 SBUF tiles):
``g = x Wg``, ``u = x Wu`` (tokens on partitions), ``dh = dy Wd^T``, ``du = dh * silu(g)``,
``dg = dh * u * silu'(g)``; ``dWd += h^T dy``, ``dWg += x^T dg``, ``dWu += x^T du`` contract
over the tokens (on partitions: no transpose), ``dx = dg Wg^T + du Wu^T`` needs ``dg^T``/``du^T``.
Matmul operands are in the inputs' dtype, every accumulation float32.
"""

from __future__ import annotations

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128
FB = 512  # moving free size / fp32 PSUM bank
SPMD = 2


def _cdiv(a, b):
    return (a + b - 1) // b


def _transpose(dst, src):
    """dst[c, r] (SBUF) = src[r, c] (SBUF), r, c <= 128, through PSUM."""
    r, c = src.shape
    tp = nl.ndarray((c, r), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(tp, src)
    nisa.tensor_copy(dst, tp)


def _load_rows(w):
    """HBM w [R, C] -> SBUF [128, R/128, C] (row chunk k at [:, k, :])."""
    r, c = w.shape
    sb = nl.ndarray((P, _cdiv(r, P), c), w.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(_cdiv(r, P)):
        n = min(P, r - k * P)
        nisa.dma_copy(sb[0:n, k, :], w[k * P : k * P + n, :])
    return sb


def _load_rows_t(w):
    """HBM w [R, C] -> w^T in SBUF as [128, C/128, R] (Tensor Engine transposes of blocks)."""
    r, c = w.shape
    sb = nl.ndarray((P, _cdiv(c, P), r), w.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(_cdiv(r, P)):
        n = min(P, r - k * P)
        blk = nl.ndarray((n, c), w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(blk, w[k * P : k * P + n, :])
        for j in nl.affine_range(_cdiv(c, P)):
            m = min(P, c - j * P)
            _transpose(sb[0:m, j, k * P : k * P + n], blk[:, j * P : j * P + m])
    return sb


def _load_t_tile(src, p, d, dtype):
    """HBM src [p, d] -> (tile [p, d], its transpose [128, d/128, p])."""
    t = nl.ndarray((p, d), dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, src)
    tT = nl.ndarray((P, _cdiv(d, P), p), dtype, buffer=nl.sbuf)
    for c in nl.affine_range(_cdiv(d, P)):
        cw = min(P, d - c * P)
        _transpose(tT[0:cw, c, :], t[:, c * P : c * P + cw])
    return t, tT


@nki.jit
def swiglu_fwd_kernel(x, wg, wu, wd):
    """x [N, Dm], wg/wu [Dm, F], wd [F, Dm] -> y [N, Dm] in x's dtype."""
    n, dm = x.shape
    f = wg.shape[1]
    kd, kf = _cdiv(dm, P), _cdiv(f, P)
    out = nl.ndarray((n, dm), x.dtype, buffer=nl.shared_hbm)
    wg_sb, wu_sb, wd_sb = _load_rows(wg), _load_rows(wu), _load_rows(wd)
    for i in nl.affine_range(nl.program_id(0), _cdiv(n, P), nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        _, xT = _load_t_tile(x[r0 : r0 + p, :], p, dm, x.dtype)
        hT = nl.ndarray((P, kf, p), x.dtype, buffer=nl.sbuf)
        for fc in nl.affine_range(kf):
            f0 = fc * P
            fw = min(P, f - f0)
            g_ps = nl.ndarray((fw, p), nl.float32, buffer=nl.psum)
            u_ps = nl.ndarray((fw, p), nl.float32, buffer=nl.psum)
            for c in nl.affine_range(kd):  # contract over Dm on partitions
                cw = min(P, dm - c * P)
                nisa.nc_matmul(g_ps, wg_sb[0:cw, c, f0 : f0 + fw], xT[0:cw, c, :])
                nisa.nc_matmul(u_ps, wu_sb[0:cw, c, f0 : f0 + fw], xT[0:cw, c, :])
            a = nl.ndarray((fw, p), nl.float32, buffer=nl.sbuf)
            nisa.activation(a, nl.silu, g_ps)
            nisa.tensor_tensor(hT[0:fw, fc, :], a, u_ps, nl.multiply)
        for m0 in nl.affine_range(0, dm, FB):
            mw = min(FB, dm - m0)
            y_ps = nl.ndarray((p, mw), nl.float32, buffer=nl.psum)
            for fc in nl.affine_range(kf):  # contract over F on partitions
                fw = min(P, f - fc * P)
                nisa.nc_matmul(y_ps, hT[0:fw, fc, :], wd_sb[0:fw, fc, m0 : m0 + mw])
            y = nl.ndarray((p, mw), x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(y, y_ps)
            nisa.dma_copy(out[r0 : r0 + p, m0 : m0 + mw], y)
    return out


def _acc(acc, ps):
    nisa.tensor_tensor(acc, acc, ps, nl.add)


def _bwd_fblock(w, xt, xT, dyt, dyT, dgT, duT, acc, p, fb0, fbw, dm):
    """One block of <= 512 hidden units for one token tile."""
    wg_sb, wu_sb, wdT = w
    dwg_acc, dwu_acc, dwd_acc = acc
    dt = xt.dtype
    kd = _cdiv(dm, P)
    g_ps = nl.ndarray((p, fbw), nl.float32, buffer=nl.psum)
    u_ps = nl.ndarray((p, fbw), nl.float32, buffer=nl.psum)
    dh_ps = nl.ndarray((p, fbw), nl.float32, buffer=nl.psum)
    for c in nl.affine_range(kd):
        cw = min(P, dm - c * P)
        nisa.nc_matmul(g_ps, xT[0:cw, c, :], wg_sb[0:cw, c, fb0 : fb0 + fbw])
        nisa.nc_matmul(u_ps, xT[0:cw, c, :], wu_sb[0:cw, c, fb0 : fb0 + fbw])
        nisa.nc_matmul(dh_ps, dyT[0:cw, c, :], wdT[0:cw, c, fb0 : fb0 + fbw])
    sig = nl.ndarray((p, fbw), nl.float32, buffer=nl.sbuf)
    nisa.activation(sig, nl.sigmoid, g_ps)
    a = nl.ndarray((p, fbw), nl.float32, buffer=nl.sbuf)  # silu(g)
    nisa.tensor_tensor(a, g_ps, sig, nl.multiply)
    h = nl.ndarray((p, fbw), dt, buffer=nl.sbuf)
    nisa.tensor_tensor(h, a, u_ps, nl.multiply)
    du = nl.ndarray((p, fbw), dt, buffer=nl.sbuf)
    nisa.tensor_tensor(du, dh_ps, a, nl.multiply)
    # silu'(g) = sig * (1 + g * (1 - sig)) = sig + a - a * sig
    t1 = nl.ndarray((p, fbw), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(t1, a, sig, nl.multiply)
    ds = nl.ndarray((p, fbw), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(ds, a, t1, nl.subtract)
    nisa.tensor_tensor(ds, ds, sig, nl.add)
    dhu = nl.ndarray((p, fbw), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dhu, dh_ps, u_ps, nl.multiply)
    dg = nl.ndarray((p, fbw), dt, buffer=nl.sbuf)
    nisa.tensor_tensor(dg, dhu, ds, nl.multiply)
    # dWg, dWu [Dm, F] += x^T dg, x^T du: tokens contract on the partitions
    for c in nl.affine_range(kd):
        c0 = c * P
        cw = min(P, dm - c0)
        ps = nl.ndarray((cw, fbw), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps, xt[:, c0 : c0 + cw], dg)
        _acc(dwg_acc[0:cw, c, fb0 : fb0 + fbw], ps)
        ps = nl.ndarray((cw, fbw), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(ps, xt[:, c0 : c0 + cw], du)
        _acc(dwu_acc[0:cw, c, fb0 : fb0 + fbw], ps)
    for fc0 in nl.affine_range(0, fbw, P):
        fw = min(P, fbw - fc0)
        kf = (fb0 + fc0) // P
        for m0 in nl.affine_range(0, dm, FB):  # dWd [F, Dm] += h^T dy
            mw = min(FB, dm - m0)
            ps = nl.ndarray((fw, mw), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps, h[:, fc0 : fc0 + fw], dyt[:, m0 : m0 + mw])
            _acc(dwd_acc[0:fw, kf, m0 : m0 + mw], ps)
        _transpose(dgT[0:fw, kf, :], dg[:, fc0 : fc0 + fw])
        _transpose(duT[0:fw, kf, :], du[:, fc0 : fc0 + fw])


def _store_rows(dst, acc, dtype):
    r, c = dst.shape
    for k in nl.affine_range(_cdiv(r, P)):
        n = min(P, r - k * P)
        t = nl.ndarray((n, c), dtype, buffer=nl.sbuf)
        nisa.tensor_copy(t, acc[0:n, k, :])
        nisa.dma_copy(dst[k * P : k * P + n, :], t)


@nki.jit
def swiglu_bwd_kernel(dy, x, wg, wu, wd):
    """dy, x [N, Dm], wg/wu [Dm, F], wd [F, Dm] -> (dx, dwg, dwu, dwd) in their inputs' dtypes."""
    n, dm = x.shape
    f = wg.shape[1]
    kd, kf = _cdiv(dm, P), _cdiv(f, P)
    dx = nl.ndarray((n, dm), x.dtype, buffer=nl.shared_hbm)
    dwg = nl.ndarray((dm, f), wg.dtype, buffer=nl.shared_hbm)
    dwu = nl.ndarray((dm, f), wu.dtype, buffer=nl.shared_hbm)
    dwd = nl.ndarray((f, dm), wd.dtype, buffer=nl.shared_hbm)
    wg_sb, wu_sb = _load_rows(wg), _load_rows(wu)  # [128, kd, F]
    wgT, wuT = _load_rows_t(wg), _load_rows_t(wu)  # [128, kf, Dm]
    wdT = _load_rows_t(wd)  # [128, kd, F]
    acc = (
        nl.zeros((P, kd, f), nl.float32, buffer=nl.sbuf),
        nl.zeros((P, kd, f), nl.float32, buffer=nl.sbuf),
        nl.zeros((P, kf, dm), nl.float32, buffer=nl.sbuf),
    )
    for i in nl.sequential_range(_cdiv(n, P)):  # weight gradients accumulate over tokens
        r0 = i * P
        p = min(P, n - r0)
        xt, xT = _load_t_tile(x[r0 : r0 + p, :], p, dm, x.dtype)
        dyt, dyT = _load_t_tile(dy[r0 : r0 + p, :], p, dm, x.dtype)
        dgT = nl.ndarray((P, kf, p), x.dtype, buffer=nl.sbuf)
        duT = nl.ndarray((P, kf, p), x.dtype, buffer=nl.sbuf)
        for fb0 in nl.affine_range(0, f, FB):
            fbw = min(FB, f - fb0)
            _bwd_fblock((wg_sb, wu_sb, wdT), xt, xT, dyt, dyT, dgT, duT, acc, p, fb0, fbw, dm)
        for m0 in nl.affine_range(0, dm, FB):  # dx = dg Wg^T + du Wu^T, contract over F
            mw = min(FB, dm - m0)
            dx_ps = nl.ndarray((p, mw), nl.float32, buffer=nl.psum)
            for fc in nl.affine_range(kf):
                fw = min(P, f - fc * P)
                nisa.nc_matmul(dx_ps, dgT[0:fw, fc, :], wgT[0:fw, fc, m0 : m0 + mw])
                nisa.nc_matmul(dx_ps, duT[0:fw, fc, :], wuT[0:fw, fc, m0 : m0 + mw])
            t = nl.ndarray((p, mw), x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(t, dx_ps)
            nisa.dma_copy(dx[r0 : r0 + p, m0 : m0 + mw], t)
    _store_rows(dwg, acc[0], wg.dtype)
    _store_rows(dwu, acc[1], wu.dtype)
    _store_rows(dwd, acc[2], wd.dtype)
    return dx, dwg, dwu, dwd


# ---- torch ops ----------------------------------------------------------------------------------
def _bwd_fake(dy, x, wg, wu, wd):
    return torch.empty_like(x), torch.empty_like(wg), torch.empty_like(wu), torch.empty_like(wd)


swiglu_bwd = nki_op("torchneuron::nki_swiglu_mlp_bwd", swiglu_bwd_kernel, num_outputs=4, fake=_bwd_fake)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, wg, wu, wd = ctx.saved_tensors
    return swiglu_bwd(grad.contiguous(), x, wg, wu, wd)


swiglu_fwd = nki_op(
    "torchneuron::nki_swiglu_mlp", swiglu_fwd_kernel, grid=SPMD, backward=_backward, setup_context=_setup
)


def swiglu_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """``(silu(x @ w_gate) * (x @ w_up)) @ w_down`` over the last dim of ``x`` (any leading
    dims); ``w_gate``/``w_up [Dm, F]``, ``w_down [F, Dm]``. Through
    ``torch.ops.torchneuron.nki_swiglu_mlp``; differentiable in all four."""
    dm = x.shape[-1]
    y = swiglu_fwd(x.reshape(-1, dm).contiguous(), w_gate.contiguous(), w_up.contiguous(), w_down.contiguous())
    return y.reshape(x.shape)
