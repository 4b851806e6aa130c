"""RMSNorm and softmax NKI kernels vs PyTorch, fp32 and bf16, forward and backward.

Tolerances: the kernels keep every statistic in fp32 and round once when writing the output.
fp32: only summation order and numpy-vs-torch exp/rsqrt differ -> rtol/atol 1e-5.
bf16: compared with the fp32 reference on the same (bf16) inputs, a single rounding on write
costs at most half a bf16 ulp = 2^-8 relative; fp32 intermediates add ~1e-6 -> rtol 2^-8 * 1.05
and a small atol for values near 0 (cancellation in dx is computed in fp32 before rounding).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torchneuron import nki
from torchneuron.kernels import (
    rms_norm,
    rmsnorm_bwd_kernel,
    rmsnorm_fwd_kernel,
    softmax,
    softmax_bwd_kernel,
    softmax_fwd_kernel,
)
from torchneuron.kernels.rmsnorm import rmsnorm_bwd
from torchneuron.kernels.softmax import softmax_bwd

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2**-8 * 1.05, atol=1e-4)}
SHAPE = (3, 100, 384)  # 300 rows: two full 128-row tiles and a ragged one of 44


def _inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(SHAPE, generator=g) * 2).to(dtype)
    w = (1 + 0.2 * torch.randn(SHAPE[-1], generator=g)).to(dtype)
    gy = torch.randn(SHAPE, generator=g).to(dtype)
    return x, w, gy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_forward_and_backward(dtype):
    x, w, gy = _inputs(dtype)
    xn = x.to("neuron").requires_grad_()
    wn = w.to("neuron").requires_grad_()
    y = rms_norm(xn, wn, 1e-6)
    assert y.device.type == "neuron" and y.dtype == dtype and y.shape == x.shape
    y.backward(gy.to("neuron"))
    # fp32 reference on the very same (possibly bf16-rounded) values
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    ref = F.rms_norm(xr, (SHAPE[-1],), wr, 1e-6)
    ref.backward(gy.float())
    torch.testing.assert_close(y.detach().cpu().float(), ref.detach(), **TOL[dtype])
    torch.testing.assert_close(xn.grad.cpu().float(), xr.grad, **TOL[dtype])
    assert wn.grad.dtype == dtype
    # dw sums 300 rows: fp32 accumulation (PSUM) in another order than torch's
    dw_tol = dict(rtol=TOL[dtype]["rtol"], atol=1e-4 * 300**0.5)
    torch.testing.assert_close(wn.grad.cpu().float(), wr.grad, **dw_tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_forward_and_backward(dtype):
    x, _, gy = _inputs(dtype, seed=1)
    xn = x.to("neuron").requires_grad_()
    y = softmax(xn, -1)
    assert y.device.type == "neuron" and y.dtype == dtype
    y.backward(gy.to("neuron"))
    xr = x.float().requires_grad_()
    ref = torch.softmax(xr, -1)
    ref.backward(gy.float())
    torch.testing.assert_close(y.detach().cpu().float(), ref.detach(), **TOL[dtype])
    # backward is computed from the kernel's (rounded) y: compare with the formula on that y
    yk = y.detach().cpu().float()
    dref = yk * (gy.float() - (gy.float() * yk).sum(-1, keepdim=True))
    torch.testing.assert_close(xn.grad.cpu().float(), dref, **TOL[dtype])
    if dtype == torch.float32:
        torch.testing.assert_close(xn.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-6)


def test_softmax_other_dim():
    x = torch.randn(4, 130, 6)
    torch.testing.assert_close(softmax(x.to("neuron"), 1).cpu(), torch.softmax(x, 1), rtol=1e-5, atol=1e-6)


def test_backward_ops_called_directly():
    x, w, gy = _inputs(torch.float32)
    x2, g2 = x.reshape(-1, SHAPE[-1]), gy.reshape(-1, SHAPE[-1])
    dx, dw = rmsnorm_bwd(g2.to("neuron"), x2.to("neuron"), w.reshape(1, -1).to("neuron"), 1e-6)
    assert dx.shape == x2.shape and dw.shape == (1, SHAPE[-1])
    y = torch.softmax(x2, -1)
    torch.testing.assert_close(
        softmax_bwd(g2.to("neuron"), y.to("neuron")).cpu(), y * (g2 - (g2 * y).sum(-1, keepdim=True))
    )


ESTIMATE_SHAPE = (2048, 4096)  # bf16: 16 MiB per tensor


@pytest.mark.parametrize(
    "name,kernel,nargs",
    [
        ("rmsnorm_fwd", rmsnorm_fwd_kernel[2], "xw"),
        ("rmsnorm_bwd", rmsnorm_bwd_kernel, "gxw"),
        ("softmax_fwd", softmax_fwd_kernel[2], "x"),
        ("softmax_bwd", softmax_bwd_kernel[2], "gy"),
    ],
)
def test_trn2_estimate(name, kernel, nargs):
    """Print the timing model's trn2 estimate (run with -s); sanity bound only."""
    rng = np.random.default_rng(0)
    n, d = ESTIMATE_SHAPE
    big = rng.standard_normal((n, d)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((1, d)).astype(ml_dtypes.bfloat16)
    args = {"x": big, "g": big, "y": big, "w": w}
    call = [args[c] for c in nargs] + ([1e-6] if "w" in nargs else [])
    _, prof = nki.simulate(kernel, target="trn2", return_profile=True)(*call)
    tensors = sum(1 for c in nargs if c != "w") + 1  # inputs + the one [N, D] output
    nbytes = tensors * n * d * 2
    print(f"{name} {n}x{d} bf16 trn2 estimate: {prof.duration * 1e6:.1f} us ({nbytes / 2**20:.0f} MiB HBM traffic)")
    assert prof.duration > 0
    assert prof.duration < 2e-3
