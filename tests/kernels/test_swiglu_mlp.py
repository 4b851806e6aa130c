"""SwiGLU MLP NKI kernels vs PyTorch, fp32 and bf16, forward and backward (all four inputs).

Errors are measured norm-wise, ``||got - ref|| / ||ref||``, against fp32 math on the same
(possibly bf16-rounded) inputs:
* fp32: only the summation order differs (matmuls accumulate in fp32 PSUM over <= 640 terms,
  weight gradients over 300 tokens): ~1e-7 per operation -> bound 1e-5.
* bf16: ``h``, ``dg``, ``du`` (and their transposes) are rounded to bf16 as matmul operands,
  and every output is rounded once: a few roundings of <= 2^-9 each -> bound 2^-7.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.kernels import swiglu_mlp


def _rel(a, b):
    a, b = a.detach().cpu().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    "dtype,shape",
    [(torch.float32, (3, 100, 192, 640)), (torch.bfloat16, (2, 100, 256, 512))],
    ids=["fp32-ragged", "bf16"],
)
def test_swiglu_mlp_forward_and_backward(dtype, shape):
    b, s, dm, f = shape  # fp32: 300 tokens (ragged tile), Dm = 128 + 64, F over two blocks
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, s, dm, generator=g).to(dtype)
    wg = (torch.randn(dm, f, generator=g) / dm**0.5).to(dtype)
    wu = (torch.randn(dm, f, generator=g) / dm**0.5).to(dtype)
    wd = (torch.randn(f, dm, generator=g) / f**0.5).to(dtype)
    gy = torch.randn(b, s, dm, generator=g).to(dtype)
    dev = [t.to("neuron").requires_grad_() for t in (x, wg, wu, wd)]
    y = swiglu_mlp(*dev)
    assert y.device.type == "neuron" and y.dtype == dtype and y.shape == x.shape
    y.backward(gy.to("neuron"))
    ref_in = [t.float().clone().requires_grad_() for t in (x, wg, wu, wd)]
    xr, wgr, wur, wdr = ref_in
    ref = (F.silu(xr @ wgr) * (xr @ wur)) @ wdr
    ref.backward(gy.float())
    bound = 1e-5 if dtype == torch.float32 else 2**-7
    assert _rel(y, ref) < bound
    for t, r in zip(dev, ref_in, strict=True):
        assert t.grad.dtype == dtype
        assert _rel(t.grad, r.grad) < bound
    if dtype == torch.float32:
        torch.testing.assert_close(y.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
