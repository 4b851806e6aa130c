"""scaled_dot_product_attention on `neuron` takes the host's fused kernel when it applies."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron


def _qkv(shape=(2, 4, 16, 8), dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g, dtype=dtype, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("mask_kind", ["causal", "bool", "float", "none"])
def test_sdpa_matches_cpu_forward_and_backward(mask_kind):
    q, k, v = _qkv()
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[:, 0] = True
    elif mask_kind == "float":
        mask = torch.randn(16, 16)
    kw = {"is_causal": mask_kind == "causal", "attn_mask": mask}
    ref = F.scaled_dot_product_attention(q, k, v, **kw)
    ref.square().sum().backward()
    qd, kd, vd = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    kw_d = dict(kw, attn_mask=None if mask is None else mask.to("neuron"))
    torchneuron.clear_op_tracking()
    out = F.scaled_dot_product_attention(qd, kd, vd, **kw_d)
    out.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)
    for d, c in ((qd, q), (kd, k), (vd, v)):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-6)
    ops = torchneuron.get_executed_ops()
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops
    assert "aten::bmm" not in ops  # no math decomposition


def test_sdpa_with_dropout_and_gqa_still_correct_shape():
    q, k, v = _qkv()
    qd, kd, vd = (t.detach().to("neuron") for t in (q, k, v))
    assert F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5).shape == q.shape
    k2, v2 = kd[:, :2], vd[:, :2]
    ref = F.scaled_dot_product_attention(q.detach(), k.detach()[:, :2], v.detach()[:, :2], enable_gqa=True)
    out = F.scaled_dot_product_attention(qd, k2, v2, enable_gqa=True)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)


def test_sdpa_bf16_and_inference_mode():
    q, k, v = _qkv(dtype=torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), is_causal=True)
    with torch.inference_mode():
        out = F.scaled_dot_product_attention(*(t.detach().to("neuron") for t in (q, k, v)), is_causal=True)
    torch.testing.assert_close(out.cpu(), ref)


def test_sdpa_3d_inputs_take_the_math_path():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, n, 8, generator=g) for n in (3, 6, 6))
    out = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"))
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v), rtol=1e-5, atol=1e-6)


def test_sdpa_mask_that_requires_grad_gets_its_gradient():
    """A learned additive mask (relative-position bias: BEiT, CoAtNet): the host picks the math
    kernel when the mask needs a gradient, and so must the device (the fused kernel has none)."""
    torch.manual_seed(0)
    q = torch.randn(2, 2, 8, 16, requires_grad=True)
    bias = torch.randn(1, 2, 8, 8, requires_grad=True)
    qd = q.detach().to("neuron").requires_grad_()
    bd = bias.detach().to("neuron").requires_grad_()
    F.scaled_dot_product_attention(q, q, q, attn_mask=bias).square().sum().backward()
    F.scaled_dot_product_attention(qd, qd, qd, attn_mask=bd).square().sum().backward()
    torch.testing.assert_close(bd.grad.cpu(), bias.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(qd.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
