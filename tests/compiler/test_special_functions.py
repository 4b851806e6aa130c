"""Special functions compiled as float32 arithmetic (``compiler/special_functions.py``), measured
against ATen in float64: the bounds are the documented ones, ATen's own float32 kernels are within
1e-7–6e-6 of the same reference."""

from __future__ import annotations

import math

import pytest
import torch

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.special_functions import (
    FUNCTIONS,
    polygamma_low_orders,
    special_function_decompositions,
    trigamma_series,
)

DEVICE = "neuron"
_aten = torch.ops.aten
_INF, _NAN = math.inf, math.nan


def _grid(lo, hi, n, *extra):
    return torch.cat([torch.linspace(lo, hi, n), torch.tensor(extra, dtype=torch.float32)])


# op: (inputs, bound on |error| / max(1, |exact|))
_CASES = {
    _aten.erfinv.default: (_grid(-1, 1, 20001, -1.0, 1.0, 1 - 6e-8, 0.0, -0.0, 1.5, _NAN), 5e-7),
    _aten.erfc.default: (_grid(-6, 10, 20001, _INF, -_INF, _NAN, 9.9), 5e-7),
    _aten.special_erfcx.default: (_grid(-9, 50, 20001, _INF, 1e10, _NAN, -10.0), 5e-7),
    _aten.special_log_ndtr.default: (_grid(-30, 10, 20001, -100.0, _INF, -_INF), 5e-7),
    _aten.special_ndtri.default: (_grid(0, 1, 20001, 1e-30, 1e-10, 1 - 6e-8, -0.1, 1.1), 5e-7),
    _aten.lgamma.default: (_grid(-20, 40, 60001, 1e-30, 1e-5, 1e6, 1e30, 0.0, -1.0, -3.0, _INF, -_INF, -100.5), 4e-6),
    _aten.digamma.default: (_grid(-20, 40, 60001, 1e-30, 1e-5, 1e6, 0.0, -0.0, -1.0, _INF, -_INF, 1.4616321), 1e-6),
    _aten.i0.default: (_grid(-85, 85, 20001, _INF, -_INF, 15.0, 15.0001), 5e-6),
    _aten.special_i0e.default: (_grid(-200, 200, 20001, _INF, 1e6), 1e-6),
    _aten.special_i1.default: (_grid(-85, 85, 20001, _INF, -_INF, -0.0), 5e-6),
    _aten.special_i1e.default: (_grid(-200, 200, 20001, _INF, -1e6), 1e-6),
}


@pytest.mark.parametrize("op", list(_CASES), ids=str)
def test_accuracy_and_special_values_against_aten(op):
    x, bound = _CASES[op]
    got = FUNCTIONS[op](x)
    exact = op(x.double())
    aten32 = op(x)
    assert got.dtype == torch.float32
    # NaNs and infinities where ATen's float32 kernel has them
    assert torch.equal(got.isnan(), aten32.isnan())
    assert torch.equal(got.isinf(), aten32.isinf()) and torch.equal(got[got.isinf()], aten32[aten32.isinf()])
    finite = got.isfinite()
    error = (got[finite].double() - exact[finite]).abs() / exact[finite].abs().clamp_min(1.0)
    assert error.max().item() <= bound


def test_trigamma_and_the_orders_left_eager():
    x = _grid(-20, 40, 60001, 0.0, -0.0, _INF, -_INF, 1e-30, 1e30)
    got, exact, aten32 = trigamma_series(x), torch.polygamma(1, x.double()), torch.polygamma(1, x)
    assert torch.equal(got.isnan(), aten32.isnan())
    # at the negative integers ATen's float32 ``sin(πx)`` is not 0: ~1e15 there, the pole's inf here
    poles = (x < 0) & (x == x.floor()) & x.isfinite()
    assert torch.equal(got.isinf() & ~poles, aten32.isinf() & ~poles) and bool(got[poles].isinf().all())
    finite = got.isfinite() & exact.isfinite()
    error = (got[finite].double() - exact[finite]).abs() / exact[finite].abs().clamp_min(1.0)
    assert error.max().item() <= 1e-6
    torch.testing.assert_close(polygamma_low_orders(0, x[:100]), FUNCTIONS[_aten.digamma.default](x[:100]), equal_nan=True)
    assert polygamma_low_orders(2, x) is NotImplemented


def test_half_integer_and_double_inputs():
    table = special_function_decompositions()
    lgamma = table[_aten.lgamma.default]
    h = torch.linspace(0.1, 8, 50).half()
    assert lgamma(h).dtype == torch.float16
    torch.testing.assert_close(lgamma(h), torch.lgamma(h))  # float32 inside, rounded like ATen
    i = torch.arange(-3, 4)
    torch.testing.assert_close(table[_aten.erfc.default](i), torch.erfc(i))  # integers promote to float
    assert lgamma(torch.ones(3, dtype=torch.float64)) is NotImplemented  # float64 keeps its precision eagerly


def test_special_functions_compile_forward_and_backward():
    x = torch.linspace(0.02, 0.98, 97)

    def f(t):
        return (torch.erfinv(2 * t - 1) + torch.erfc(t * 4) + torch.lgamma(t * 30) + torch.digamma(t * 30)
                + torch.special.ndtri(t) + torch.i0(t * 20) / 1e6 + torch.special.i1e(t * 5))

    reset_metrics()
    got = torch.compile(f, backend="neuron")(x.to(DEVICE)).cpu()
    torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-5)
    w, wd = x.clone().requires_grad_(), x.to(DEVICE).requires_grad_()

    def loss(t):  # lgamma's backward is digamma, digamma's trigamma
        return (torch.lgamma(t * 3) + torch.digamma(t + 1) + torch.erfinv(t - 0.5) * torch.erfc(t) + torch.i0(t)).sum()

    torch.compile(loss, backend="neuron")(wd).backward()
    loss(w).backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)
    placement = [where for g in get_metrics()["graphs"].values() for where in g["placement"].values()]
    assert "eager" not in placement
