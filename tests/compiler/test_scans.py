"""``cummax``/``cummin``/``cumprod`` compiled as log-step scans (``compiler/scans.py``)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.scans import scan_cummax, scan_cummin, scan_cumprod

DEVICE = "neuron"

# few distinct values, so that ties and NaNs are frequent
_elements = st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, float("nan"), float("inf"), float("-inf")])


def _eager_placements() -> list[str]:
    return [node for g in get_metrics()["graphs"].values() for node, where in g["placement"].items() if where == "eager"]


@settings(max_examples=150, deadline=None)
@given(st.lists(_elements, min_size=1, max_size=40), st.booleans())
def test_extremum_scans_take_atens_index_on_ties_and_nans(values, maximum):
    x = torch.tensor(values).view(1, -1).expand(2, -1).contiguous()
    ours, aten = (scan_cummax, torch.cummax) if maximum else (scan_cummin, torch.cummin)
    got_values, got_index = ours(x, 1)
    want_values, want_index = aten(x, 1)
    torch.testing.assert_close(got_values, want_values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got_index, want_index)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=33), st.sampled_from([torch.int32, torch.int64, torch.uint8]))
def test_integer_scans_are_exact(values, dtype):
    x = torch.tensor(values).abs().to(dtype) if dtype == torch.uint8 else torch.tensor(values, dtype=dtype)
    for ours, aten in ((scan_cummax, torch.cummax), (scan_cummin, torch.cummin)):
        got, want = ours(x, 0), aten(x, 0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(scan_cumprod(x, 0), torch.cumprod(x, 0))


def test_cumprod_float_within_float32_rounding():
    x = torch.rand(3, 100) * 0.4 + 0.8  # products stay in range: rounding, not overflow
    torch.testing.assert_close(scan_cumprod(x, 1), torch.cumprod(x, 1), rtol=2e-6 * 7, atol=0)  # log2(100) roundings
    assert scan_cumprod(x, 0, dtype=torch.float64).dtype == torch.float64


def test_scans_compile_into_one_region_forward_and_backward():
    torch.manual_seed(0)
    x = torch.randn(4, 37)
    x[1, 5] = float("nan")
    x[2, 3:6] = 1.0

    def f(x):
        values, index = torch.cummax(x * 2, 1)
        low, low_index = torch.cummin(x, 0)
        return values + 1, index + 1, low * 2, low_index * 2, torch.cumprod(x * 0.1 + 1, -1) + 1

    reset_metrics()
    got = torch.compile(f, backend="neuron")(x.to(DEVICE))
    for g, w in zip(got, f(x), strict=True):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=1e-5, atol=1e-6)
    assert _eager_placements() == []

    w = torch.randn(3, 8, requires_grad=True)

    def loss(w):
        values, _ = torch.cummax(w * 2, 1)
        return (values * torch.cumprod(w * 0.1 + 1, 1)).sum()

    wd = w.detach().to(DEVICE).requires_grad_()
    reset_metrics()
    torch.compile(loss, backend="neuron")(wd).backward()
    loss(w).backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)
    assert _eager_placements() == []
