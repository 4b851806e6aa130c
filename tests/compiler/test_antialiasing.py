"""Antialiased resampling compiled as matrix products (``compiler/antialiasing.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.antialiasing import antialiasing_decompositions

DEVICE = "neuron"
_aten = torch.ops.aten

# (in, out, align_corners, scales): down- and upsampling, an odd ratio, a given scale factor,
# the same size, a single output pixel
_CASES = [((16, 16), (7, 5), False, None), ((8, 12), (16, 20), False, None), ((32, 17), (3, 17), True, None),
          ((10, 10), (4, 4), False, (0.4, 0.4)), ((64, 48), (14, 9), False, None), ((5, 5), (1, 1), False, None),
          ((7, 9), (7, 9), False, None), ((9, 9), (4, 5), True, None)]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(("size", "out", "align_corners", "scales"), _CASES)
def test_weights_are_atens_in_float64(mode, size, out, align_corners, scales):
    table = antialiasing_decompositions()
    forward = getattr(_aten, f"_upsample_{mode}2d_aa").default
    backward = getattr(_aten, f"_upsample_{mode}2d_aa_backward").default
    torch.manual_seed(0)
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    grad = torch.randn(2, 3, *out, dtype=torch.float64)
    scale_args = scales or (None, None)
    # float64 leaves only the rounding of a different summation order
    torch.testing.assert_close(table[forward](x, list(out), align_corners, *scale_args),
                               forward(x, list(out), align_corners, *scale_args), rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(table[backward](grad, list(out), list(x.shape), align_corners, *scale_args),
                               backward(grad, list(out), list(x.shape), align_corners, *scale_args), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_with_antialias_compiles_forward_and_backward(mode):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 24, 20, requires_grad=True)

    def f(x):
        return (F.interpolate(x * 2, size=(9, 13), mode=mode, antialias=True) + 1).square().sum()

    xd = x.detach().to(DEVICE).requires_grad_()
    reset_metrics()
    got = torch.compile(f, backend="neuron")(xd)
    got.backward()
    want = f(x)
    want.backward()
    # float32 sums of ~24 products per output: a few ulps of the total
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    placement = [where for g in get_metrics()["graphs"].values() for where in g["placement"].values()]
    assert "eager" not in placement
