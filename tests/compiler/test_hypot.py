"""``hypot`` compiled through its scaled form (``compiler/hypot.py``): no overflow, C's special values."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics
from torchneuron.compiler.hypot import scaled_hypot

DEVICE = "neuron"

_values = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False), st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, 1e30]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_values, _values), min_size=1, max_size=16))
def test_scaled_form_matches_aten_within_two_ulps(pairs):
    a = torch.tensor([p[0] for p in pairs], dtype=torch.float32)
    b = torch.tensor([p[1] for p in pairs], dtype=torch.float32)
    expected = torch.hypot(a, b)
    got = scaled_hypot(a, b)
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    finite = expected.isfinite()
    ulp = torch.finfo(torch.float32).eps * expected[finite].abs()
    assert bool(((got[finite] - expected[finite]).abs() <= 2 * ulp + torch.finfo(torch.float32).tiny).all())


def test_hypot_compiles_without_overflow():
    def f(a, b):
        return torch.hypot(a * 2, b) + 1

    a = torch.tensor([3e19, 1.5, 0.0, -4.0, float("inf")])
    b = torch.tensor([4e19, -2.0, 0.0, float("nan"), float("nan")])
    got = torch.compile(f, backend="neuron")(a.to(DEVICE), b.to(DEVICE)).cpu()
    torch.testing.assert_close(got, f(a, b), equal_nan=True)
    placement = [where for g in get_metrics()["graphs"].values() for n, where in g["placement"].items()]
    assert "eager" not in placement
