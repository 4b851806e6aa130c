"""Mixture-of-experts building blocks in NKI (current dialect), and their ``torch`` ops.

* **Router top-k** (:func:`moe_router_topk`): ``softmax(logits)`` per token, the ``k`` largest
  probabilities with ``nisa.max8`` / ``nisa.nc_find_index8`` (k <= 8), optionally
  renormalised to sum to 1. Backward: ``d logits`` through the softmax (all experts) or,
  renormalised, through the softmax over the selected experts only.
* **Routing metadata** (:func:`moe_routing`, host side, integer bookkeeping only): token
  slots ``(t, j)`` sorted by expert, each expert's rows padded to whole blocks of 128, so
  that every block of the permuted activations belongs to one expert:
  ``row_to_token [R, 1]`` (-1 for padding), ``row_to_slot [R, 1]``, ``slot_to_row [T, k]``
  and ``block_expert [R/128, 1]``.
* **Permute / unpermute** (:func:`moe_permute`, :func:`moe_unpermute`): gathers by
  indirect DMA (``x[idx_tile, :]`` with an SBUF index tile, ``oob_mode.skip`` leaving
  padding rows zero). Unpermute sums a token's ``k`` expert outputs weighted by its
  affinities. Every backward is again a gather (no scatter, no atomics): the inverse maps
  are part of the metadata.
* **Blockwise grouped matmul** (:func:`moe_grouped_matmul`): ``y[block] = x[block] @
  w[block_expert[block]]``; the expert's weight rows are fetched with an indirect DMA whose
  row indices are computed on chip from the block's expert id (``iota`` + ``e * Din``).
  Backward: ``dx[block] = dy[block] @ w[e]^T`` and ``dw[e] += x[block]^T dy[block]`` by
  DMA scatter-add (``dst_rmw_op=nl.add``) into an fp32 HBM accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128
FB = 512
SPMD = 2
BLOCK = 128  # rows per expert block of the permuted activations


def _cdiv(a, b):
    return (a + b - 1) // b


# ---- router ------------------------------------------------------------------------------------
def _softmax_rows(lt, p, e):
    """fp32 softmax of the [p, E] tile ``lt`` over the experts."""
    neg_max = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(neg_max, nl.max, lt, axis=1, negate=True, keepdims=True)
    ex = nl.ndarray((p, e), nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(ex, nl.exp, lt, bias=neg_max, reduce_op=nl.add, reduce_res=s)
    inv = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(inv, s)
    probs = nl.ndarray((p, e), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(probs, ex, nl.multiply, inv)
    return probs


def _topk_indices(cand, top, iota_w, p, k):
    """Expert index of each of the k largest values. One rank at a time: nc_find_index8
    finds the first occurrence of a value, so each chosen expert is pushed below every
    probability before the next search (tied probabilities then get distinct experts)."""
    width = cand.shape[1]
    idx = nl.ndarray((p, k), nl.int32, buffer=nl.sbuf)
    work = nl.ndarray((p, width), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(work, cand)
    for j in nl.static_range(k):
        found = nl.ndarray((p, 8), nl.int32, buffer=nl.sbuf)
        nisa.nc_find_index8(found, work, top)
        nisa.tensor_copy(idx[:, j : j + 1], found[:, j : j + 1])
        if j + 1 < k:
            fj = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(fj, found[:, j : j + 1])
            eq = nl.ndarray((p, width), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(eq, iota_w[0:p, :], nl.equal, fj)
            nisa.scalar_tensor_tensor(work, eq, nl.multiply, -4.0, nl.add, work)
    return idx


@nki.jit
def moe_router_fwd_kernel(logits, k=2, normalize=True):
    """logits [T, E] -> (weights [T, k] float32, experts [T, k] int32), by descending weight."""
    t_count, e = logits.shape
    weights = nl.ndarray((t_count, k), nl.float32, buffer=nl.shared_hbm)
    experts = nl.ndarray((t_count, k), nl.int32, buffer=nl.shared_hbm)
    width = max(e, 8)  # max8 reads at least 8 values per partition
    iota_w = nl.ndarray((P, width), nl.float32, buffer=nl.sbuf)
    nisa.iota(iota_w, [[1, width]])
    for i in nl.affine_range(nl.program_id(0), _cdiv(t_count, P), nl.num_programs(0)):
        r0 = i * P
        p = min(P, t_count - r0)
        lt = nl.ndarray((p, e), logits.dtype, buffer=nl.sbuf)
        nisa.dma_copy(lt, logits[r0 : r0 + p, :])
        probs = _softmax_rows(lt, p, e)
        cand = probs
        if width > e:  # pad with -1: below every probability
            cand = nl.full((p, width), -1.0, nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(cand[:, 0:e], probs)
        top = nl.ndarray((p, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(top, cand)
        idx = _topk_indices(cand, top, iota_w, p, k)
        w = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
        if normalize:
            s = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(s, nl.add, top[:, 0:k], axis=1, keepdims=True)
            inv = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(inv, s)
            nisa.tensor_scalar(w, top[:, 0:k], nl.multiply, inv)
        else:
            nisa.tensor_copy(w, top[:, 0:k])
        nisa.dma_copy(weights[r0 : r0 + p, :], w)
        nisa.dma_copy(experts[r0 : r0 + p, :], idx[:, 0:k])
    return weights, experts


def _scatter_cols(dst, iota_e, idx_f, vals, p, k):
    """dst[p, E] = sum_j onehot(idx[:, j]) * vals[:, j] (Vector Engine compares with iota)."""
    nisa.memset(dst, 0.0)
    for j in nl.static_range(k):
        eq = nl.ndarray(dst.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(eq, iota_e[0:p, :], nl.equal, idx_f[:, j : j + 1])
        nisa.scalar_tensor_tensor(dst, eq, nl.multiply, vals[:, j : j + 1], nl.add, dst)


@nki.jit
def moe_router_bwd_kernel(dw, logits, weights, experts, normalize=True):
    """dL/dweights [T, k], the forward's logits, weights, experts -> dL/dlogits [T, E]."""
    t_count, e = logits.shape
    k = dw.shape[1]
    dlogits = nl.ndarray((t_count, e), logits.dtype, buffer=nl.shared_hbm)
    iota_e = nl.ndarray((P, e), nl.float32, buffer=nl.sbuf)
    nisa.iota(iota_e, [[1, e]])
    for i in nl.affine_range(nl.program_id(0), _cdiv(t_count, P), nl.num_programs(0)):
        r0 = i * P
        p = min(P, t_count - r0)
        dwt = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dwt, dw[r0 : r0 + p, :])
        it = nl.ndarray((p, k), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(it, experts[r0 : r0 + p, :])
        idx_f = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(idx_f, it)
        g = nl.ndarray((p, e), nl.float32, buffer=nl.sbuf)  # dw scattered to its experts
        _scatter_cols(g, iota_e, idx_f, dwt, p, k)
        dot = nl.ndarray((p, 1), nl.float32, buffer=nl.sbuf)
        if normalize:  # softmax over the selected experts: dl = w * (dw - sum(dw * w))
            wt = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(wt, weights[r0 : r0 + p, :])
            prod = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(prod, dwt, wt, nl.multiply)
            nisa.tensor_reduce(dot, nl.add, prod, axis=1, keepdims=True)
            scale = nl.ndarray((p, e), nl.float32, buffer=nl.sbuf)
            _scatter_cols(scale, iota_e, idx_f, wt, p, k)
        else:  # through the softmax over all experts: dl = p * (g - sum(g * p))
            lt = nl.ndarray((p, e), logits.dtype, buffer=nl.sbuf)
            nisa.dma_copy(lt, logits[r0 : r0 + p, :])
            scale = _softmax_rows(lt, p, e)
            prod = nl.ndarray((p, e), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(prod, g, scale, nl.multiply)
            nisa.tensor_reduce(dot, nl.add, prod, axis=1, keepdims=True)
        dl = nl.ndarray((p, e), logits.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dl, g, nl.subtract, dot, nl.multiply, scale)
        nisa.dma_copy(dlogits[r0 : r0 + p, :], dl)
    return dlogits


# ---- gathers (permute, unpermute and their backwards) ---------------------------------------------
def _gather(dst, src, it, j):
    """dst[p, D] = src[it[:, j], :], rows with an out-of-range index left at zero."""
    nisa.memset(dst, 0.0)
    nisa.dma_copy(dst, src[it[:, j : j + 1], :], oob_mode=nisa.oob_mode.skip)


@nki.jit
def moe_gather_kernel(src, idx, weights=None):
    """src [R, D], idx [N, k] int32, weights [N, k] or None -> out [N, D] (src's dtype):
    ``out[n] = sum_j weights[n, j] * src[idx[n, j]]`` (weights 1 if None); an index outside
    ``[0, R)`` (e.g. -1 for padding) contributes nothing."""
    r, d = src.shape
    n, k = idx.shape
    out = nl.ndarray((n, d), src.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(nl.program_id(0), _cdiv(n, P), nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        it = nl.ndarray((p, k), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(it, idx[r0 : r0 + p, :])
        if k == 1 and weights is None:  # a pure permutation: DMA in, DMA out
            g = nl.ndarray((p, d), src.dtype, buffer=nl.sbuf)
            _gather(g, src, it, 0)
            nisa.dma_copy(out[r0 : r0 + p, :], g)
            continue
        wt = None
        if weights is not None:
            wt = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(wt, weights[r0 : r0 + p, :])
        acc = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
        for j in nl.static_range(k):
            g = nl.ndarray((p, d), src.dtype, buffer=nl.sbuf)
            _gather(g, src, it, j)
            if j == 0:
                if wt is None:
                    nisa.tensor_copy(acc, g)
                else:
                    nisa.tensor_scalar(acc, g, nl.multiply, wt[:, 0:1])
            elif wt is None:
                nisa.tensor_tensor(acc, acc, g, nl.add)
            else:
                nisa.scalar_tensor_tensor(acc, g, nl.multiply, wt[:, j : j + 1], nl.add, acc)
        o = nl.ndarray((p, d), src.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(o, acc)
        nisa.dma_copy(out[r0 : r0 + p, :], o)
    return out


@nki.jit
def moe_gather_dot_kernel(a, src, idx):
    """a [N, D], src [R, D], idx [N, k] -> out [N, k] float32, ``out[n, j] = <a[n],
    src[idx[n, j]]>`` (0 for an out-of-range index)."""
    n, d = a.shape
    k = idx.shape[1]
    out = nl.ndarray((n, k), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(nl.program_id(0), _cdiv(n, P), nl.num_programs(0)):
        r0 = i * P
        p = min(P, n - r0)
        it = nl.ndarray((p, k), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(it, idx[r0 : r0 + p, :])
        at = nl.ndarray((p, d), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(at, a[r0 : r0 + p, :])
        o = nl.ndarray((p, k), nl.float32, buffer=nl.sbuf)
        for j in nl.static_range(k):
            g = nl.ndarray((p, d), src.dtype, buffer=nl.sbuf)
            _gather(g, src, it, j)
            prod = nl.ndarray((p, d), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(prod, g, at, nl.multiply)
            nisa.tensor_reduce(o[:, j : j + 1], nl.add, prod, axis=1, keepdims=True)
        nisa.dma_copy(out[r0 : r0 + p, :], o)
    return out


@nki.jit
def moe_permute_kernel(x, row_to_token, slot_to_row):
    """x [T, D] -> x_perm [R, D], ``x_perm[r] = x[row_to_token[r]]`` (zero rows for padding).
    ``slot_to_row`` is the inverse map, used by the backward."""
    return moe_gather_kernel(x, row_to_token)


@nki.jit
def moe_unpermute_kernel(y_perm, affinities, slot_to_row, row_to_token, row_to_slot):
    """y_perm [R, D], affinities [T, k] -> y [T, D], ``y[t] = sum_j affinities[t, j] *
    y_perm[slot_to_row[t, j]]``. ``row_to_token``/``row_to_slot`` are for the backward."""
    return moe_gather_kernel(y_perm, slot_to_row, affinities)


# ---- blockwise grouped matmul -----------------------------------------------------------------------
def _transpose(dst, src):
    r, c = src.shape
    tp = nl.ndarray((c, r), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(tp, src)
    nisa.tensor_copy(dst, tp)


def _expert_rows(block_expert, b, din):
    """[128, 1] int32 row indices ``e * Din + p`` of expert ``block_expert[b]``'s weight rows
    in the [E * Din, Dout] view (the block's expert id is only known at run time)."""
    et = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(et, block_expert[b : b + 1, :])
    rows = nl.ndarray((P, 1), nl.int32, buffer=nl.sbuf)
    nisa.iota(rows, [[1, 1]], channel_multiplier=1)
    base = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(base, et, nl.multiply, din)
    nisa.tensor_scalar(rows, rows, nl.add, base)
    return rows


def _gather_expert(w_flat, rows, din, dout, dtype):
    """The block's expert weight [Din, Dout] as [128, Din/128, Dout] in SBUF."""
    w_sb = nl.ndarray((P, _cdiv(din, P), dout), dtype, buffer=nl.sbuf)
    for c in nl.affine_range(_cdiv(din, P)):
        cw = min(P, din - c * P)
        rc = nl.ndarray((cw, 1), nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(rc, rows[0:cw, :], nl.add, c * P)
        nisa.dma_copy(w_sb[0:cw, c, :], w_flat[rc, :])
    return w_sb, rows


def _load_block_t(src, b, d, dtype):
    """Rows of block b of src [R, d] as (tile [128, d], its transpose [128, d/128, 128])."""
    t = nl.ndarray((P, d), dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, src[b * P : (b + 1) * P, :])
    tT = nl.ndarray((P, _cdiv(d, P), P), dtype, buffer=nl.sbuf)
    for c in nl.affine_range(_cdiv(d, P)):
        cw = min(P, d - c * P)
        _transpose(tT[0:cw, c, :], t[:, c * P : c * P + cw])
    return t, tT


@nki.jit
def moe_grouped_matmul_fwd_kernel(x, w, block_expert):
    """x [R, Din] (R = 128 * blocks), w [E, Din, Dout], block_expert [R/128, 1] int32 ->
    y [R, Dout] in x's dtype, ``y[block] = x[block] @ w[block_expert[block]]``."""
    r, din = x.shape
    e, _, dout = w.shape
    y = nl.ndarray((r, dout), x.dtype, buffer=nl.shared_hbm)
    w_flat = w.reshape((e * din, dout))
    kd = _cdiv(din, P)
    for b in nl.affine_range(nl.program_id(0), r // P, nl.num_programs(0)):
        rows = _expert_rows(block_expert, b, din)
        w_sb, _ = _gather_expert(w_flat, rows, din, dout, w.dtype)
        _, xT = _load_block_t(x, b, din, x.dtype)
        for m0 in nl.affine_range(0, dout, FB):
            mw = min(FB, dout - m0)
            ps = nl.ndarray((P, mw), nl.float32, buffer=nl.psum)
            for c in nl.affine_range(kd):
                cw = min(P, din - c * P)
                nisa.nc_matmul(ps, xT[0:cw, c, :], w_sb[0:cw, c, m0 : m0 + mw])
            o = nl.ndarray((P, mw), x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(o, ps)
            nisa.dma_copy(y[b * P : (b + 1) * P, m0 : m0 + mw], o)
    return y


@nki.jit
def moe_grouped_matmul_bwd_kernel(dy, x, w, block_expert):
    """dy [R, Dout], x [R, Din], w [E, Din, Dout] -> (dx [R, Din], dw [E, Din, Dout]).
    One program: the weight gradient accumulates by DMA scatter-add into an fp32 HBM buffer
    shared by all blocks of an expert."""
    r, din = x.shape
    e, _, dout = w.shape
    kd, ko = _cdiv(din, P), _cdiv(dout, P)
    dx = nl.ndarray((r, din), x.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((e, din, dout), w.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((e * din, dout), nl.float32, buffer=nl.hbm)
    zero = nl.zeros((P, dout), nl.float32, buffer=nl.sbuf)
    for r0 in nl.affine_range(0, e * din, P):
        nisa.dma_copy(acc[r0 : min(e * din, r0 + P), :], zero[0 : min(P, e * din - r0), :])
    w_flat = w.reshape((e * din, dout))
    for b in nl.sequential_range(r // P):
        rows = _expert_rows(block_expert, b, din)
        w_sb, _ = _gather_expert(w_flat, rows, din, dout, w.dtype)
        wT = nl.ndarray((P, ko, din), w.dtype, buffer=nl.sbuf)  # w[e]^T, Dout on partitions
        for c in nl.affine_range(kd):
            cw = min(P, din - c * P)
            for o in nl.affine_range(ko):
                ow = min(P, dout - o * P)
                _transpose(wT[0:ow, o, c * P : c * P + cw], w_sb[0:cw, c, o * P : o * P + ow])
        dyt, dyT = _load_block_t(dy, b, dout, dy.dtype)
        xt = nl.ndarray((P, din), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(xt, x[b * P : (b + 1) * P, :])
        for m0 in nl.affine_range(0, din, FB):  # dx = dy w^T, contract over Dout
            mw = min(FB, din - m0)
            ps = nl.ndarray((P, mw), nl.float32, buffer=nl.psum)
            for o in nl.affine_range(ko):
                ow = min(P, dout - o * P)
                nisa.nc_matmul(ps, dyT[0:ow, o, :], wT[0:ow, o, m0 : m0 + mw])
            t = nl.ndarray((P, mw), x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(t, ps)
            nisa.dma_copy(dx[b * P : (b + 1) * P, m0 : m0 + mw], t)
        for c in nl.affine_range(kd):  # dw[e] += x^T dy, the block's rows contract
            cw = min(P, din - c * P)
            rc = nl.ndarray((cw, 1), nl.int32, buffer=nl.sbuf)
            nisa.tensor_scalar(rc, rows[0:cw, :], nl.add, c * P)
            for m0 in nl.affine_range(0, dout, FB):
                mw = min(FB, dout - m0)
                ps = nl.ndarray((cw, mw), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(ps, xt[:, c * P : c * P + cw], dyt[:, m0 : m0 + mw])
                t = nl.ndarray((cw, mw), nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(t, ps)
                nisa.dma_copy(acc[rc, m0 : m0 + mw], t, dst_rmw_op=nl.add)
    dw_flat = dw.reshape((e * din, dout))
    for r0 in nl.affine_range(0, e * din, P):
        n = min(P, e * din - r0)
        t32 = nl.ndarray((n, dout), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t32, acc[r0 : r0 + n, :])
        t = nl.ndarray((n, dout), w.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(t, t32)
        nisa.dma_copy(dw_flat[r0 : r0 + n, :], t)
    return dx, dw


# ---- torch ops ----------------------------------------------------------------------------------
def _gather_fake(src, idx, weights=None):
    return src.new_empty((idx.shape[0], src.shape[1]))


def _gather_dot_fake(a, src, idx):
    return a.new_empty(idx.shape, dtype=torch.float32)


moe_gather = nki_op("torchneuron::nki_moe_gather", moe_gather_kernel, grid=SPMD, fake=_gather_fake)
moe_gather_dot = nki_op("torchneuron::nki_moe_gather_dot", moe_gather_dot_kernel, grid=SPMD, fake=_gather_dot_fake)


def _router_fake(logits, k=2, normalize=True):
    shape = (logits.shape[0], k)
    return logits.new_empty(shape, dtype=torch.float32), logits.new_empty(shape, dtype=torch.int32)


def _router_bwd_fake(dw, logits, weights, experts, normalize=True):
    return torch.empty_like(logits)


moe_router_bwd = nki_op(
    "torchneuron::nki_moe_router_bwd", moe_router_bwd_kernel, grid=SPMD, fake=_router_bwd_fake
)


def _router_setup(ctx, inputs, output):
    logits, _, normalize = inputs
    weights, experts = output
    ctx.save_for_backward(logits, weights, experts)
    ctx.normalize = normalize
    ctx.mark_non_differentiable(experts)


def _router_backward(ctx, d_weights, d_experts):
    logits, weights, experts = ctx.saved_tensors
    return moe_router_bwd(d_weights.float().contiguous(), logits, weights, experts, ctx.normalize), None, None


moe_router = nki_op(
    "torchneuron::nki_moe_router",
    moe_router_fwd_kernel,
    num_outputs=2,
    grid=SPMD,
    fake=_router_fake,
    backward=_router_backward,
    setup_context=_router_setup,
)


def moe_router_topk(logits: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` experts per token of ``softmax(logits [T, E])``: ``(weights [T, k] float32,
    experts [T, k] int32)`` by descending weight; ``normalize`` rescales each token's weights
    to sum to 1. Differentiable in ``logits`` (through ``weights``). ``k <= 8``."""
    if not 1 <= k <= 8 or k > logits.shape[-1]:
        raise ValueError(f"k={k} must be in [1, min(8, num_experts)]")
    return moe_router(logits.contiguous(), int(k), bool(normalize))


@dataclass(frozen=True)
class MoERouting:
    """Where every token slot goes in the permuted, block-padded layout (int32 tensors)."""

    row_to_token: torch.Tensor  # [R, 1], -1 on padding rows
    row_to_slot: torch.Tensor  # [R, 1], t * k + j, -1 on padding rows
    slot_to_row: torch.Tensor  # [T, k]
    block_expert: torch.Tensor  # [R / block, 1]
    block: int = BLOCK

    @property
    def rows(self) -> int:
        return self.row_to_token.shape[0]


def moe_routing(experts: torch.Tensor, num_experts: int, block: int = BLOCK) -> MoERouting:
    """Routing metadata for ``experts [T, k]`` (host-side integer bookkeeping; the tensors
    land on ``experts``' device): slots sorted by expert (stable), each expert's rows padded
    to a multiple of ``block``."""
    dev = experts.device
    ex = experts.detach().to("cpu", torch.int64)
    t_count, k = ex.shape
    flat = ex.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block - 1) // block * block
    start = torch.cumsum(padded, 0) - padded
    first = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    row = start[sorted_e] + torch.arange(flat.numel()) - first[sorted_e]
    rows = int(padded.sum())
    row_to_token = torch.full((rows, 1), -1, dtype=torch.int64)
    row_to_slot = torch.full((rows, 1), -1, dtype=torch.int64)
    row_to_token[row, 0] = order // k
    row_to_slot[row, 0] = order
    slot_to_row = torch.empty(flat.numel(), dtype=torch.int64)
    slot_to_row[order] = row
    block_expert = torch.repeat_interleave(torch.arange(num_experts), padded // block).reshape(-1, 1)

    def put(t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.int32).to(dev)

    return MoERouting(
        put(row_to_token), put(row_to_slot), put(slot_to_row.reshape(t_count, k)), put(block_expert), block
    )


def _permute_fake(x, row_to_token, slot_to_row):
    return x.new_empty((row_to_token.shape[0], x.shape[1]))


def _permute_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[2])


def _permute_backward(ctx, grad):
    (slot_to_row,) = ctx.saved_tensors
    return moe_gather(grad.contiguous(), slot_to_row), None, None


moe_permute_op = nki_op(
    "torchneuron::nki_moe_permute",
    moe_permute_kernel,
    grid=SPMD,
    fake=_permute_fake,
    backward=_permute_backward,
    setup_context=_permute_setup,
)


def _unpermute_fake(y_perm, affinities, slot_to_row, row_to_token, row_to_slot):
    return y_perm.new_empty((slot_to_row.shape[0], y_perm.shape[1]))


def _unpermute_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _unpermute_backward(ctx, grad):
    y_perm, aff, slot_to_row, row_to_token, row_to_slot = ctx.saved_tensors
    grad = grad.contiguous()
    # d y_perm[r] = affinity of the row's slot * grad[row's token] (0 on padding rows)
    row_aff = moe_gather(aff.float().reshape(-1, 1), row_to_slot)
    d_y_perm = moe_gather(grad, row_to_token, row_aff)
    d_aff = moe_gather_dot(grad, y_perm, slot_to_row).to(aff.dtype)
    return d_y_perm, d_aff, None, None, None


moe_unpermute_op = nki_op(
    "torchneuron::nki_moe_unpermute",
    moe_unpermute_kernel,
    grid=SPMD,
    fake=_unpermute_fake,
    backward=_unpermute_backward,
    setup_context=_unpermute_setup,
)


def moe_permute(x: torch.Tensor, routing: MoERouting) -> torch.Tensor:
    """``x [T, D]`` -> ``[R, D]`` rows grouped by expert in blocks (padding rows zero)."""
    return moe_permute_op(x.contiguous(), routing.row_to_token, routing.slot_to_row)


def moe_unpermute(y_perm: torch.Tensor, affinities: torch.Tensor, routing: MoERouting) -> torch.Tensor:
    """``[R, D]`` expert outputs -> ``[T, D]``, each token's ``k`` outputs weighted by its
    ``affinities [T, k]`` and summed. Differentiable in both."""
    return moe_unpermute_op(
        y_perm.contiguous(), affinities.contiguous(), routing.slot_to_row, routing.row_to_token, routing.row_to_slot
    )


def _gmm_fake(x, w, block_expert):
    return x.new_empty((x.shape[0], w.shape[2]))


def _gmm_bwd_fake(dy, x, w, block_expert):
    return torch.empty_like(x), torch.empty_like(w)


moe_grouped_matmul_bwd = nki_op(
    "torchneuron::nki_moe_grouped_matmul_bwd", moe_grouped_matmul_bwd_kernel, num_outputs=2, fake=_gmm_bwd_fake
)


def _gmm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gmm_backward(ctx, grad):
    x, w, block_expert = ctx.saved_tensors
    dx, dw = moe_grouped_matmul_bwd(grad.contiguous(), x, w, block_expert)
    return dx, dw, None


moe_grouped_matmul_op = nki_op(
    "torchneuron::nki_moe_grouped_matmul",
    moe_grouped_matmul_fwd_kernel,
    grid=SPMD,
    fake=_gmm_fake,
    backward=_gmm_backward,
    setup_context=_gmm_setup,
)


def moe_grouped_matmul(x_perm: torch.Tensor, w: torch.Tensor, routing: MoERouting) -> torch.Tensor:
    """Blockwise grouped matmul: every block of 128 rows of ``x_perm [R, Din]`` times its
    expert's ``w [E, Din, Dout]``. Differentiable in both."""
    if routing.block != P:
        raise ValueError(f"the grouped matmul works on blocks of {P} rows")
    return moe_grouped_matmul_op(x_perm.contiguous(), w.contiguous(), routing.block_expert)
