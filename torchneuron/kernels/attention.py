"""Flash attention in NKI (current dialect): forward and backward kernels, and the ``torch`` op.

Shapes: ``q [B, H, Sq, D]``, ``k``/``v [B, Hkv, Sk, D]`` with ``H % Hkv == 0`` (grouped-query
attention: query head ``h`` reads key/value head ``h // (H // Hkv)``), ``D <= 128``. Causal
masking is top-left aligned like ``F.scaled_dot_product_attention(is_causal=True)``: query
``i`` sees keys ``j <= i``. Sequence lengths need not be multiples of 128.

Forward (FlashAttention-2 style, per 128-query tile): the score block ``S = Q K^T`` for up to
512 keys is one ``nc_matmul`` (``Q^T`` stationary, ``K^T`` moving) into a PSUM bank; the
diagonal blocks of a causal launch get an additive mask (built once with ``affine_select``); the running row max and
row sum are kept in float32 and ``exp`` runs on the Scalar Engine with the row sum fused in;
``P V`` accumulates in PSUM over 128-key chunks (``P^T`` through a Tensor Engine transpose).
Blocks entirely above the causal diagonal are skipped. The kernel also returns the log-sum-exp
of every row (float32), which the backward kernel uses to rebuild ``P`` without the softmax.

Backward (per key/value head and 128-key tile, looping over the group's query heads and the
query tiles): ``dV += P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - rowsum(dO * O))``,
``dK += dS^T Q``, ``dQ += dS K``; ``dK``/``dV`` accumulate in PSUM over the query tiles, ``dQ``
in an fp32 SBUF tile over the key tiles. Matmul operands are in the inputs' dtype (bf16 inputs
give bf16 ``P``/``dS`` operands, as on the chip); every accumulation is float32.
"""

from __future__ import annotations

import math

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128  # partitions per tile: queries per tile, keys per PV chunk
KB = 512  # keys per score block (one PSUM bank of fp32)
SPMD = 2  # programs per launch: both physical cores of an LNC=2 logical core
NEG = -1.0e30  # masked score; exp(scale * NEG - m) underflows to 0 (finite: no inf - inf)


def _load_t(dst, src, dtype):
    """dst[D, n] (SBUF) = src[n, D] (HBM)^T, n <= 128: DMA in, Tensor Engine transpose into
    PSUM, copy back to SBUF."""
    n, d = src.shape
    t = nl.ndarray((n, d), dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, src)
    tp = nl.ndarray((d, n), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(tp, t)
    nisa.tensor_copy(dst, tp)


class _CausalMasks:
    """Additive causal masks, built once per launch (one per offset): ``mask[off][p, f]`` is 0 where key
    ``f`` may be seen by query ``p + off`` of a diagonal block and NEG where not (GpSimd
    ``affine_select`` on an SBUF tile; the GpSimd Engine cannot read the scores in PSUM).
    Query tiles start at multiples of 128 and key blocks at multiples of their width, so a
    block crossing the diagonal has ``off = q0 - k0`` in {0, 128, ...} below the width."""

    def __init__(self, width, causal):
        # built at the start of the launch: off the critical path, next to the first loads
        self.masks = {}
        for off in nl.static_range(0, width if causal else 0, P):
            m = nl.zeros((P, width), nl.float32, buffer=nl.sbuf)
            nisa.affine_select(
                m,
                pattern=[[-1, width]],
                channel_multiplier=1,
                on_true_tile=m,
                on_false_value=NEG,
                cmp_op=nl.greater_equal,
                offset=off,
            )
            self.masks[off] = m

    def apply(self, dst, scores, q0, k0):
        """dst = scores + mask (Vector Engine: reads the PSUM scores, writes SBUF)."""
        nq, kb = dst.shape
        nisa.tensor_tensor(dst, scores, self.masks[q0 - k0][0:nq, 0:kb], nl.add)


def _fwd_qtile(q, out, lse, b, h, q0, nq, kT, v_sb, sk, d, scale, causal, masks):
    dt = q.dtype
    qT = nl.ndarray((d, nq), dt, buffer=nl.sbuf)
    _load_t(qT, q[b, h, q0 : q0 + nq, :], dt)
    neg_m = None  # -(running row max), scaled units
    l_sum = o_acc = None
    kend = min(sk, q0 + nq) if causal else sk  # keys past the last query are all masked
    for k0 in nl.sequential_range(0, kend, KB):
        kb = min(KB, kend - k0)
        s_ps = nl.ndarray((nq, kb), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(s_ps, qT, kT[:, k0 : k0 + kb])
        src = s_ps
        if causal and k0 + kb - 1 > q0:  # the block crosses the diagonal
            src = nl.ndarray((nq, kb), nl.float32, buffer=nl.sbuf)
            masks.apply(src, s_ps, q0, k0)
        mx = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(mx, nl.max, src, axis=1, keepdims=True)
        new_neg_m = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)
        if neg_m is None:
            nisa.tensor_scalar(new_neg_m, mx, nl.multiply, -scale)
        else:  # -max(m, scale * mx) = min(-m, -scale * mx)
            nisa.scalar_tensor_tensor(new_neg_m, mx, nl.multiply, -scale, nl.minimum, neg_m)
        # p = exp(scale * s - m) in the matmul dtype, row sums (fp32) fused in
        p = nl.ndarray((nq, kb), dt, buffer=nl.sbuf)
        rs = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(p, nl.exp, src, bias=new_neg_m, scale=scale, reduce_op=nl.add, reduce_res=rs)
        pv = nl.ndarray((nq, d), nl.float32, buffer=nl.psum)
        for c0 in nl.static_range(0, kb, P):
            if causal and k0 + c0 > q0 + nq - 1:
                break  # this chunk and the next ones are masked for every query of the tile
            kc = min(P, kb - c0)
            pT_ps = nl.ndarray((kc, nq), nl.float32, buffer=nl.psum)
            nisa.nc_transpose(pT_ps, p[:, c0 : c0 + kc])
            pT = nl.ndarray((kc, nq), dt, buffer=nl.sbuf)
            nisa.activation(pT, nl.copy, pT_ps)  # PSUM evacuation on the Scalar Engine
            nisa.nc_matmul(pv, pT, v_sb[0:kc, (k0 + c0) // P, :])
        if neg_m is None:
            l_sum = rs
            o_acc = nl.ndarray((nq, d), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(o_acc, pv)
        else:
            alpha = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)  # exp(m_old - m_new)
            nisa.activation(alpha, nl.exp, neg_m, scale=-1.0, bias=new_neg_m)
            nisa.scalar_tensor_tensor(l_sum, l_sum, nl.multiply, alpha, nl.add, rs)
            nisa.scalar_tensor_tensor(o_acc, o_acc, nl.multiply, alpha, nl.add, pv)
        neg_m = new_neg_m
    inv = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(inv, l_sum)
    ot = nl.ndarray((nq, d), dt, buffer=nl.sbuf)
    nisa.tensor_scalar(ot, o_acc, nl.multiply, inv)
    nisa.dma_copy(out[b, h, q0 : q0 + nq, :], ot)
    lt = nl.ndarray((nq, 1), nl.float32, buffer=nl.sbuf)  # lse = m + log(l)
    nisa.activation(lt, nl.log, l_sum)
    nisa.tensor_tensor(lt, lt, neg_m, nl.subtract)
    nisa.dma_copy(lse[b, h, q0 : q0 + nq], lt)


def _load_kv(k, v, b, g, sk, d):
    """K^T [D, Sk] and V as [128, Sk/128, D] (keys on partitions) for one key/value head."""
    dt = k.dtype
    kT = nl.ndarray((d, sk), dt, buffer=nl.sbuf)
    v_sb = nl.ndarray((P, (sk + P - 1) // P, d), v.dtype, buffer=nl.sbuf)
    for t in nl.affine_range((sk + P - 1) // P):
        n = min(P, sk - t * P)
        _load_t(kT[:, t * P : t * P + n], k[b, g, t * P : t * P + n, :], dt)
        nisa.dma_copy(v_sb[0:n, t, :], v[b, g, t * P : t * P + n, :])
    return kT, v_sb


@nki.jit
def flash_attn_fwd_kernel(q, k, v, scale=1.0, causal=False):
    """q [B, H, Sq, D], k/v [B, Hkv, Sk, D] -> (out [B, H, Sq, D] in q's dtype,
    lse [B, H, Sq] float32)."""
    bsz, h_q, sq, d = q.shape
    h_kv, sk = k.shape[1], k.shape[2]
    group = h_q // h_kv
    out = nl.ndarray((bsz, h_q, sq, d), q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bsz, h_q, sq), nl.float32, buffer=nl.shared_hbm)
    # SPMD: program p takes (batch, kv head) pairs p, p + G, ...
    masks = _CausalMasks(KB, causal)
    for bg in nl.affine_range(nl.program_id(0), bsz * h_kv, nl.num_programs(0)):
        b, g = bg // h_kv, bg % h_kv
        kT, v_sb = _load_kv(k, v, b, g, sk, d)
        for hq in nl.affine_range(group):
            for q0 in nl.affine_range(0, sq, P):
                nq = min(P, sq - q0)
                _fwd_qtile(q, out, lse, b, g * group + hq, q0, nq, kT, v_sb, sk, d, scale, causal, masks)
    return out, lse


# ---- backward ----------------------------------------------------------------------------------
def _bwd_load_head(q, o, do, lse, b, h, sq, d):
    """Everything the backward needs from one query head, on chip."""
    dt = q.dtype
    nqt = (sq + P - 1) // P
    qT = nl.ndarray((d, sq), dt, buffer=nl.sbuf)
    doT = nl.ndarray((d, sq), dt, buffer=nl.sbuf)
    q_sb = nl.ndarray((P, nqt, d), dt, buffer=nl.sbuf)
    do_sb = nl.ndarray((P, nqt, d), dt, buffer=nl.sbuf)
    neg_lse = nl.ndarray((P, nqt), nl.float32, buffer=nl.sbuf)
    delta = nl.ndarray((P, nqt), nl.float32, buffer=nl.sbuf)  # rowsum(dO * O)
    for i in nl.affine_range(nqt):
        q0 = i * P
        n = min(P, sq - q0)
        _load_t(qT[:, q0 : q0 + n], q[b, h, q0 : q0 + n, :], dt)
        _load_t(doT[:, q0 : q0 + n], do[b, h, q0 : q0 + n, :], dt)
        nisa.dma_copy(q_sb[0:n, i, :], q[b, h, q0 : q0 + n, :])
        nisa.dma_copy(do_sb[0:n, i, :], do[b, h, q0 : q0 + n, :])
        ot = nl.ndarray((n, d), o.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ot, o[b, h, q0 : q0 + n, :])
        prod = nl.ndarray((n, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(prod, do_sb[0:n, i, :], ot, nl.multiply)
        nisa.tensor_reduce(delta[0:n, i : i + 1], nl.add, prod, axis=1, keepdims=True)
        lt = nl.ndarray((n, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(lt, lse[b, h, q0 : q0 + n])
        nisa.tensor_scalar(neg_lse[0:n, i : i + 1], lt, nl.multiply, -1.0)
    return qT, doT, q_sb, do_sb, neg_lse, delta


def _bwd_block(hd, kv, dq_acc, dk_ps, dv_ps, i, j, nq, nk, scale, causal, masks):
    qT, doT, q_sb, do_sb, neg_lse, delta = hd
    kT, vT, k_sb = kv
    dt = q_sb.dtype
    q0, k0 = i * P, j * P
    s_ps = nl.ndarray((nq, nk), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(s_ps, qT[:, q0 : q0 + nq], kT[:, k0 : k0 + nk])
    src = s_ps
    if causal and k0 + nk - 1 > q0:
        src = nl.ndarray((nq, nk), nl.float32, buffer=nl.sbuf)
        masks.apply(src, s_ps, q0, k0)
    p = nl.ndarray((nq, nk), nl.float32, buffer=nl.sbuf)  # P = exp(scale * S - lse)
    nisa.activation(p, nl.exp, src, bias=neg_lse[0:nq, i : i + 1], scale=scale)
    pm = p
    if dt != nl.float32:
        pm = nl.ndarray((nq, nk), dt, buffer=nl.sbuf)
        nisa.activation(pm, nl.copy, p)
    nisa.nc_matmul(dv_ps, pm, do_sb[0:nq, i, :])  # dV += P^T dO
    dp_ps = nl.ndarray((nq, nk), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dp_ps, doT[:, q0 : q0 + nq], vT[:, k0 : k0 + nk])  # dP = dO V^T
    ds = nl.ndarray((nq, nk), dt, buffer=nl.sbuf)  # dS = (dP - delta) * P
    nisa.scalar_tensor_tensor(ds, dp_ps, nl.subtract, delta[0:nq, i : i + 1], nl.multiply, p)
    nisa.nc_matmul(dk_ps, ds, q_sb[0:nq, i, :])  # dK += dS^T Q
    dsT_ps = nl.ndarray((nk, nq), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dsT_ps, ds)
    dsT = nl.ndarray((nk, nq), dt, buffer=nl.sbuf)
    nisa.activation(dsT, nl.copy, dsT_ps)  # on the Scalar Engine: the Vector Engine is the busier
    dq_ps = nl.ndarray((nq, dq_acc.shape[2]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dq_ps, dsT, k_sb[0:nk, j, :])  # dQ += dS K
    nisa.tensor_tensor(dq_acc[0:nq, i, :], dq_acc[0:nq, i, :], dq_ps, nl.add)


def _bwd_ktile(hd, kv, dq_acc, dk_acc, dv_acc, j, sq, sk, d, scale, causal, masks):
    k0 = j * P
    nk = min(P, sk - k0)
    dk_ps = nl.ndarray((nk, d), nl.float32, buffer=nl.psum)
    dv_ps = nl.ndarray((nk, d), nl.float32, buffer=nl.psum)
    used = False
    for i in nl.sequential_range((sq + P - 1) // P):  # dK/dV accumulate in PSUM
        q0 = i * P
        nq = min(P, sq - q0)
        if causal and k0 > q0 + nq - 1:
            continue  # every key of the tile is after every query of this tile
        _bwd_block(hd, kv, dq_acc, dk_ps, dv_ps, i, j, nq, nk, scale, causal, masks)
        used = True
    if used:
        nisa.tensor_tensor(dk_acc[0:nk, j, :], dk_acc[0:nk, j, :], dk_ps, nl.add)
        nisa.tensor_tensor(dv_acc[0:nk, j, :], dv_acc[0:nk, j, :], dv_ps, nl.add)


def _store_scaled(dst, acc, i, n, d, scale, dtype):
    t = nl.ndarray((n, d), dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(t, acc[0:n, i, :], nl.multiply, scale)
    nisa.dma_copy(dst, t)


@nki.jit
def flash_attn_bwd_kernel(do, q, k, v, o, lse, scale=1.0, causal=False):
    """dO, q, o [B, H, Sq, D], k/v [B, Hkv, Sk, D], lse [B, H, Sq] (from the forward) ->
    (dq in q's dtype, dk, dv in k's/v's dtype)."""
    bsz, h_q, sq, d = q.shape
    h_kv, sk = k.shape[1], k.shape[2]
    group = h_q // h_kv
    nqt, nkt = (sq + P - 1) // P, (sk + P - 1) // P
    dq = nl.ndarray(q.shape, q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray(k.shape, k.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray(v.shape, v.dtype, buffer=nl.shared_hbm)
    masks = _CausalMasks(P, causal)
    for bg in nl.affine_range(nl.program_id(0), bsz * h_kv, nl.num_programs(0)):
        b, g = bg // h_kv, bg % h_kv
        kT = nl.ndarray((d, sk), k.dtype, buffer=nl.sbuf)
        vT = nl.ndarray((d, sk), v.dtype, buffer=nl.sbuf)
        k_sb = nl.ndarray((P, nkt, d), k.dtype, buffer=nl.sbuf)
        for j in nl.affine_range(nkt):
            n = min(P, sk - j * P)
            _load_t(kT[:, j * P : j * P + n], k[b, g, j * P : j * P + n, :], k.dtype)
            _load_t(vT[:, j * P : j * P + n], v[b, g, j * P : j * P + n, :], v.dtype)
            nisa.dma_copy(k_sb[0:n, j, :], k[b, g, j * P : j * P + n, :])
        kv = (kT, vT, k_sb)
        dk_acc = nl.zeros((P, nkt, d), nl.float32, buffer=nl.sbuf)
        dv_acc = nl.zeros((P, nkt, d), nl.float32, buffer=nl.sbuf)
        for hq in nl.sequential_range(group):  # dK/dV sum over the group's query heads
            h = g * group + hq
            hd = _bwd_load_head(q, o, do, lse, b, h, sq, d)
            dq_acc = nl.zeros((P, nqt, d), nl.float32, buffer=nl.sbuf)
            for j in nl.sequential_range(nkt):  # dQ accumulates over the key tiles
                _bwd_ktile(hd, kv, dq_acc, dk_acc, dv_acc, j, sq, sk, d, scale, causal, masks)
            for i in nl.affine_range(nqt):
                n = min(P, sq - i * P)
                _store_scaled(dq[b, h, i * P : i * P + n, :], dq_acc, i, n, d, scale, q.dtype)
        for j in nl.affine_range(nkt):
            n = min(P, sk - j * P)
            _store_scaled(dk[b, g, j * P : j * P + n, :], dk_acc, j, n, d, scale, k.dtype)
            _store_scaled(dv[b, g, j * P : j * P + n, :], dv_acc, j, n, d, 1.0, v.dtype)
    return dq, dk, dv


# ---- torch ops ----------------------------------------------------------------------------------
def _fwd_fake(q, k, v, scale=1.0, causal=False):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def _bwd_fake(do, q, k, v, o, lse, scale=1.0, causal=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


flash_attn_bwd = nki_op(
    "torchneuron::nki_flash_attn_bwd", flash_attn_bwd_kernel, num_outputs=3, grid=SPMD, fake=_bwd_fake
)


def _setup(ctx, inputs, output):
    q, k, v, scale, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scale, ctx.causal = scale, causal
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attn_bwd(grad_out.contiguous(), q, k, v, out, lse, ctx.scale, ctx.causal)
    return dq, dk, dv, None, None


flash_attn_fwd = nki_op(
    "torchneuron::nki_flash_attn",
    flash_attn_fwd_kernel,
    num_outputs=2,
    grid=SPMD,
    fake=_fwd_fake,
    backward=_backward,
    setup_context=_setup,
)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """``softmax(q k^T * scale [+ causal mask]) v`` through the NKI flash kernels
    (``torch.ops.torchneuron.nki_flash_attn``); differentiable. ``q [B, H, Sq, D]``,
    ``k``/``v [B, Hkv, Sk, D]`` with ``H % Hkv == 0``; ``scale`` defaults to ``1/sqrt(D)``."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("flash_attention takes 4-D [B, H, S, D] tensors")
    if q.shape[1] % k.shape[1] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[-1] > P:
        raise ValueError(f"head dim {q.shape[-1]} > {P}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    out, _ = flash_attn_fwd(q.contiguous(), k.contiguous(), v.contiguous(), float(scale), bool(is_causal))
    return out


# ---- F.scaled_dot_product_attention on the device (TORCHNEURON_NKI_SDPA=1) ----------------------
_SDPA_DTYPES = (torch.float32, torch.bfloat16)


def sdpa_fits(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> bool:
    """Can this ``scaled_dot_product_attention`` call run on the NKI flash kernels? No
    arbitrary mask, no dropout, 4-D fp32/bf16 tensors of one dtype, head dim <= 128, the same
    batch, and key/value heads equal to the query heads (or dividing them with
    ``enable_gqa=True``)."""
    if attn_mask is not None or dropout_p != 0.0:
        return False
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _SDPA_DTYPES:
        return False
    b, h, sq, d = query.shape
    if key.shape != value.shape or key.shape[0] != b or key.shape[3] != d or d > P:
        return False
    if sq == 0 or key.shape[2] == 0:
        return False
    hkv = key.shape[1]
    return hkv == h or (enable_gqa and hkv > 0 and h % hkv == 0)


def sdpa_via_nki(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The attention through the flash kernels if :func:`sdpa_fits`, else ``None``."""
    if not sdpa_fits(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        return None
    return flash_attention(query, key, value, is_causal=is_causal, scale=scale)
