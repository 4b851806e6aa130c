"""Flash attention NKI kernels vs ``F.scaled_dot_product_attention``: forward and backward,
fp32 and bf16, causal and full, grouped-query attention, ragged sequence lengths.

Tolerances:
* fp32: the kernel and PyTorch differ only in summation order (online softmax over 512-key
  blocks, PSUM accumulation over 128-key chunks) -> elementwise 2e-5 abs / 1e-5 rel
  (fp32 eps 1.2e-7 times a few hundred accumulated terms).
* bf16: the reference is fp32 attention on the very same bf16 inputs. The kernel rounds
  ``P`` to bf16 before ``P V`` and rounds the output once (each a relative error <= 2^-9 per
  element), so the output's norm-wise relative error is bounded by ~2 * 2^-9 -> we allow
  2^-7. The gradients go through two more bf16 roundings (``P``/``dS`` as matmul operands and
  ``dS^T``) before their own -> 2^-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torchneuron import nki
from torchneuron.kernels import flash_attention
from torchneuron.kernels.attention import flash_attn_bwd, flash_attn_fwd_kernel


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().float(), b.detach().cpu().float()
    return float((a - b).norm() / b.norm())


def _inputs(b, h, hkv, sq, sk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, sk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, sk, d, generator=g).to(dtype)
    go = torch.randn(b, h, sq, d, generator=g).to(dtype)
    return q, k, v, go


def _run(q, k, v, go, causal, scale=None):
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    out = flash_attention(qn, kn, vn, is_causal=causal, scale=scale)
    out.backward(go.to("neuron"))
    qr, kr, vr = (t.detach().float().clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale, enable_gqa=True)
    ref.backward(go.float())
    return (out, qn.grad, kn.grad, vn.grad), (ref, qr.grad, kr.grad, vr.grad)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gqa_forward_backward(dtype, causal):
    # 4 query heads on 2 kv heads; 200 = one full 128-row tile and a ragged one of 72
    q, k, v, go = _inputs(1, 4, 2, 200, 200, 64, dtype)
    got, ref = _run(q, k, v, go, causal)
    assert got[0].device.type == "neuron" and got[0].dtype == dtype
    assert [g.dtype for g in got[1:]] == [dtype] * 3
    if dtype == torch.float32:
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a.detach().cpu(), b, rtol=1e-5, atol=2e-5)
    else:
        assert _rel(got[0], ref[0]) < 2**-7
        for a, b in zip(got[1:], ref[1:], strict=True):
            assert _rel(a, b) < 2**-6


def test_cross_attention_lengths_and_custom_scale():
    # Sq != Sk over several 512-key blocks, causal top-left aligned (query i sees keys <= i)
    q, k, v, go = _inputs(2, 2, 1, 130, 700, 32, torch.float32, seed=3)
    for causal in (False, True):
        got, ref = _run(q, k, v, go, causal, scale=0.3)
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a.detach().cpu(), b, rtol=1e-5, atol=2e-5)


def test_forward_kernel_on_numpy_returns_logsumexp():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 256, 64), dtype=np.float32)
    k = rng.standard_normal((1, 2, 256, 64), dtype=np.float32)
    v = rng.standard_normal((1, 2, 256, 64), dtype=np.float32)
    out, lse = flash_attn_fwd_kernel[2](q, k, v, 0.125, True)
    s = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) * 0.125
    s = s.masked_fill(torch.ones(256, 256, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(torch.from_numpy(lse), torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        torch.from_numpy(out), torch.softmax(s, -1) @ torch.from_numpy(v), rtol=1e-5, atol=1e-5
    )


def test_backward_op_called_directly_matches_autograd():
    q, k, v, go = _inputs(1, 2, 2, 128, 128, 32, torch.float32, seed=5)
    qn, kn, vn, gn = (t.to("neuron") for t in (q, k, v, go))
    out, lse = torch.ops.torchneuron.nki_flash_attn(qn, kn, vn, 0.2, False)
    dq, dk, dv = flash_attn_bwd(gn, qn, kn, vn, out, lse, 0.2, False)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    F.scaled_dot_product_attention(qr, kr, vr, scale=0.2).backward(go)
    for a, b in ((dq, qr.grad), (dk, kr.grad), (dv, vr.grad)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=2e-5)


def test_causal_skips_blocks_above_the_diagonal():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 1, 512, 64), dtype=np.float32) for _ in range(3))
    run = nki.simulate(flash_attn_fwd_kernel, target="trn2", return_profile=True)
    _, full = run(q, k, v, 0.125, False)
    _, causal = run(q, k, v, 0.125, True)
    mm = lambda p: p.instruction_counts()["nisa.nc_matmul"]  # noqa: E731
    # PV: full 4 query tiles x 4 key chunks; causal the 10 on or below the diagonal
    assert mm(full) - mm(causal) == 16 - 10
    assert causal.total_flops < full.total_flops
    assert causal.duration < full.duration


def test_rejects_unsupported_shapes():
    q = torch.randn(1, 3, 8, 16)
    with pytest.raises(ValueError):
        flash_attention(q, torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
    with pytest.raises(ValueError):
        flash_attention(torch.randn(1, 1, 8, 256), torch.randn(1, 1, 8, 256), torch.randn(1, 1, 8, 256))


@pytest.mark.slow
def test_bench_shape_forward_bf16():
    q, k, v, _ = _inputs(1, 4, 4, 1024, 1024, 128, torch.bfloat16)
    out = flash_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), is_causal=True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert _rel(out, ref) < 2**-7
    assert math.isfinite(float(out.float().abs().max()))
