"""LayerNorm and RoPE NKI kernels vs PyTorch, fp32 and bf16, forward and backward.

Tolerances (as in test_norm_softmax.py): statistics and intermediates are fp32 and each output
is rounded once when written.
* fp32: summation order and bn_stats' two-half variance only -> 1e-5.
* bf16: reference is fp32 math on the same bf16 inputs; one rounding on write costs <= 2^-9
  relative (half an ulp), so rtol 2^-8 covers it with margin; a small atol for values near 0.
* dw/db sum 300 rows in fp32 (PSUM) in another order than torch: atol grows with sqrt(rows).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torchneuron.kernels import apply_rope, layer_norm
from torchneuron.kernels.rope import rope_kernel

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2**-8, atol=1e-3)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layernorm_forward_and_backward(dtype):
    g = torch.Generator().manual_seed(0)
    shape = (3, 100, 640)  # 300 rows (ragged last tile), D over two bn_stats chunks
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    w = (1 + 0.2 * torch.randn(640, generator=g)).to(dtype)
    b = (0.1 * torch.randn(640, generator=g)).to(dtype)
    gy = torch.randn(shape, generator=g).to(dtype)
    xn, wn, bn = (t.to("neuron").requires_grad_() for t in (x, w, b))
    y = layer_norm(xn, wn, bn, 1e-5)
    assert y.device.type == "neuron" and y.dtype == dtype
    y.backward(gy.to("neuron"))
    xr, wr, br = (t.float().requires_grad_() for t in (x, w, b))
    ref = F.layer_norm(xr, (640,), wr, br, 1e-5)
    ref.backward(gy.float())
    torch.testing.assert_close(y.detach().cpu().float(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(xn.grad.cpu().float(), xr.grad, **TOL[dtype])
    sum_tol = dict(rtol=TOL[dtype]["rtol"], atol=1e-4 * math.sqrt(300))
    torch.testing.assert_close(wn.grad.cpu().float(), wr.grad, **sum_tol)
    torch.testing.assert_close(bn.grad.cpu().float(), br.grad, **sum_tol)
    assert wn.grad.dtype == bn.grad.dtype == dtype


def _rope_ref(x, cos, sin):
    """Hugging Face's apply_rotary_pos_emb with cos/sin [S, D] (halves duplicated)."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin


def _freqs(s, d, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, d, 2).float() / d)
    ang = torch.arange(s).float()[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_rope_forward_and_backward(dtype):
    g = torch.Generator().manual_seed(1)
    b, h, s, d = 2, 3, 150, 64
    x = torch.randn(b, h, s, d, generator=g).to(dtype)
    gy = torch.randn(b, h, s, d, generator=g).to(dtype)
    cos, sin = _freqs(s, d)
    xn = x.to("neuron").requires_grad_()
    y = apply_rope(xn, cos.to("neuron"), sin.to("neuron"))
    assert y.dtype == dtype and y.shape == x.shape
    y.backward(gy.to("neuron"))
    xr = x.float().requires_grad_()
    ref = _rope_ref(xr, cos, sin)
    ref.backward(gy.float())
    torch.testing.assert_close(y.detach().cpu().float(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(xn.grad.cpu().float(), xr.grad, **TOL[dtype])


def test_rope_inverse_undoes_the_rotation():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 130, 32, generator=g)
    cos, sin = (t[:, :16].contiguous() for t in _freqs(130, 32))
    y = rope_kernel[2](x, cos, sin, False)
    back = rope_kernel[2](y, cos, sin, True)
    torch.testing.assert_close(back, x, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(y, x, atol=1e-2)  # it did rotate
