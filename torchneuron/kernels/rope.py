"""Rotary position embedding (RoPE) in NKI (current dialect), and the ``torch`` op.

Rotate-half convention (GPT-NeoX / LLaMA / Hugging Face ``apply_rotary_pos_emb``): for
``x = [x1, x2]`` split in halves along the head dim and per-position ``cos``/``sin`` of
``D/2`` frequencies,

    out1 = x1 * cos - x2 * sin,   out2 = x2 * cos + x1 * sin.

The backward is the rotation by the opposite angle (the same kernel with ``inverse=True``).
Positions tile 128 to a tile on the partition dim; each tile of ``cos``/``sin`` is loaded once
and applied to every (batch, head) row block, six Vector Engine instructions per block.
"""

from __future__ import annotations

import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op

P = 128
SPMD = 2


@nki.jit
def rope_kernel(x, cos, sin, inverse=False):
    """x [BH, S, D], cos/sin [S, D/2] -> x rotated by the angles (by minus them if
    ``inverse``), in x's dtype."""
    bh, s, d = x.shape
    half = d // 2
    out = nl.ndarray((bh, s, d), x.dtype, buffer=nl.shared_hbm)
    for st in nl.affine_range((s + P - 1) // P):
        s0 = st * P
        p = min(P, s - s0)
        c = nl.ndarray((p, half), cos.dtype, buffer=nl.sbuf)
        sn = nl.ndarray((p, half), sin.dtype, buffer=nl.sbuf)
        nisa.dma_copy(c, cos[s0 : s0 + p, :])
        nisa.dma_copy(sn, sin[s0 : s0 + p, :])
        # SPMD: program k takes rows k, k + G, ... of the (batch, head) blocks
        for r in nl.affine_range(nl.program_id(0), bh, nl.num_programs(0)):
            t = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[r, s0 : s0 + p, :])
            x1, x2 = t[:, 0:half], t[:, half:d]
            a = nl.ndarray((p, half), nl.float32, buffer=nl.sbuf)
            b = nl.ndarray((p, half), nl.float32, buffer=nl.sbuf)
            e = nl.ndarray((p, half), nl.float32, buffer=nl.sbuf)
            f = nl.ndarray((p, half), nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(a, x1, c, nl.multiply)
            nisa.tensor_tensor(b, x2, sn, nl.multiply)
            nisa.tensor_tensor(e, x2, c, nl.multiply)
            nisa.tensor_tensor(f, x1, sn, nl.multiply)
            o = nl.ndarray((p, d), x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(o[:, 0:half], a, b, nl.add if inverse else nl.subtract)
            nisa.tensor_tensor(o[:, half:d], e, f, nl.subtract if inverse else nl.add)
            nisa.dma_copy(out[r, s0 : s0 + p, :], o)
    return out


def _fake(x, cos, sin, inverse=False):
    return torch.empty_like(x)


rope_op = nki_op("torchneuron::nki_rope", rope_kernel, grid=SPMD, fake=_fake)


def _setup(ctx, inputs, output):
    _, cos, sin, inverse = inputs
    ctx.save_for_backward(cos, sin)
    ctx.inverse = inverse


def _backward(ctx, grad):
    cos, sin = ctx.saved_tensors
    return rope_op(grad.contiguous(), cos, sin, not ctx.inverse), None, None, None


rope_op.register_autograd(_backward, setup_context=_setup)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., S, D]`` (e.g. queries ``[B, H, S, D]``) by per-position angles;
    ``cos``/``sin`` are ``[S, D/2]`` (or ``[S, D]`` with both halves equal, as Hugging Face
    builds them). Through ``torch.ops.torchneuron.nki_rope``; differentiable in ``x``
    (``cos``/``sin`` are constants and get no gradient)."""
    s, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"head dim {d} is odd")
    if cos.shape[-1] == d:
        cos, sin = cos[..., : d // 2], sin[..., : d // 2]
    cos = cos.reshape(s, d // 2).contiguous()
    sin = sin.reshape(s, d // 2).contiguous()
    y = rope_op(x.reshape(-1, s, d).contiguous(), cos, sin, False)
    return y.reshape(x.shape)
