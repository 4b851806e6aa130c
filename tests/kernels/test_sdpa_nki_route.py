"""``F.scaled_dot_product_attention`` on ``neuron`` takes the NKI flash kernels when
``TORCHNEURON_NKI_SDPA=1`` and the call fits, the generic device path otherwise.

Which route ran is observed through ``nki.last_profile()``: every NKI launch replaces it, the
generic path launches no kernel. Tolerances as in test_flash_attention.py (fp32: summation
order only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron import nki


def _qkv(h=2, hkv=2, s=160, d=32, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, h, s, d, generator=g).to(dtype)
    k = torch.randn(1, hkv, s, d, generator=g).to(dtype)
    v = torch.randn(1, hkv, s, d, generator=g).to(dtype)
    return q, k, v


def _device_sdpa(q, k, v, **kw):
    """Forward and backward on neuron; returns (out, grads, launched kernel names)."""
    before = nki.last_profile()
    qn, kn, vn = (t.to("neuron").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qn, kn, vn, **kw)
    out.sum().backward()
    prof = nki.last_profile()
    launched = prof is not before
    return out, (qn.grad, kn.grad, vn.grad), launched


def _reference(q, k, v, **kw):
    qr, kr, vr = (t.float().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qr, kr, vr, **kw)
    out.sum().backward()
    return out, (qr.grad, kr.grad, vr.grad)


@pytest.mark.parametrize(
    "kw,shape",
    [
        (dict(is_causal=True), {}),
        (dict(enable_gqa=True), dict(h=4, hkv=2)),
        (dict(scale=0.5), {}),
    ],
    ids=["causal", "gqa", "scale"],
)
def test_fitting_calls_use_the_nki_kernel(monkeypatch, kw, shape):
    monkeypatch.setenv("TORCHNEURON_NKI_SDPA", "1")
    q, k, v = _qkv(**shape)
    out, grads, launched = _device_sdpa(q, k, v, **kw)
    assert launched, "the NKI flash kernels did not run"
    ref, rgrads = _reference(q, k, v, **kw)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=2e-5)
    for a, b in zip(grads, rgrads, strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=2e-5)


def test_bf16_route(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_NKI_SDPA", "1")
    q, k, v = _qkv(dtype=torch.bfloat16)
    out, grads, launched = _device_sdpa(q, k, v, is_causal=True)
    assert launched and out.dtype == torch.bfloat16
    ref, rgrads = _reference(q, k, v, is_causal=True)
    rel = lambda a, b: float((a.detach().cpu().float() - b).norm() / b.norm())  # noqa: E731
    assert rel(out, ref.detach()) < 2**-7
    assert all(rel(a, b) < 2**-6 for a, b in zip(grads, rgrads, strict=True))


@pytest.mark.parametrize(
    "case",
    ["env-off", "attn-mask", "dropout", "head-dim-256", "float16"],
)
def test_other_calls_take_the_generic_path(monkeypatch, case):
    monkeypatch.setenv("TORCHNEURON_NKI_SDPA", "0" if case == "env-off" else "1")
    kw: dict = {}
    shape: dict = {}
    dtype = torch.float32
    if case == "attn-mask":
        kw["attn_mask"] = (torch.rand(160, 160, generator=torch.Generator().manual_seed(1)) > 0.3).to("neuron")
    elif case == "head-dim-256":
        shape = dict(d=256, s=64)
    elif case == "float16":
        dtype = torch.float16
    if case == "dropout":
        q, k, v = _qkv()
        before = nki.last_profile()
        qn, kn, vn = (t.to("neuron") for t in (q, k, v))
        F.scaled_dot_product_attention(qn, kn, vn, dropout_p=0.5)
        assert nki.last_profile() is before
        return
    q, k, v = _qkv(dtype=dtype, **shape)
    out, grads, launched = _device_sdpa(q, k, v, **kw)
    assert not launched
    if "attn_mask" in kw:
        kw["attn_mask"] = kw["attn_mask"].cpu()
    ref, rgrads = _reference(q, k, v, **kw)
    tol = dict(rtol=1e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out.detach().cpu().float(), ref.detach(), **tol)
    torch.testing.assert_close(grads[0].cpu().float(), rgrads[0], **tol)
